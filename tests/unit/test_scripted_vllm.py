"""The scripted vLLM the partial-rollout run and benchmark sync against (``tests/scripted_vllm.py``), through the
project's own client: a draining sync waits for the request in flight, an interrupting one does not and freezes it,
a held reply waits for a reload; and the plan script behind it (``tests/partial_run.py``)."""

from __future__ import annotations

import threading
import time

import pytest

from qwen_swe.inference.client import InferenceClient
from tests.partial_run import PlanScript, fixable_rows
from tests.scripted_server import Context, Reply
from tests.scripted_vllm import Held, VLLMThread


def _in_background(client: InferenceClient) -> tuple[threading.Thread, list[float]]:
    done: list[float] = []
    t0 = time.monotonic()

    def call() -> None:
        client.post("/v1/completions", {"model": "scripted", "prompt": "x", "max_tokens": 4})
        done.append(time.monotonic() - t0)

    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(0.3)
    return thread, done


@pytest.mark.parametrize("interrupt", [False, True])
def test_a_sync_drains_or_freezes_the_request_in_flight(tmp_path, interrupt):
    with VLLMThread(lambda ctx: Reply(text="hello", delay=1.5)) as vllm:
        client = InferenceClient(vllm.url, timeout=30, interrupt=interrupt)
        thread, done = _in_background(client)
        t0 = time.monotonic()
        assert client.reload_weights(tmp_path) == 1
        took = time.monotonic() - t0
        thread.join(10)
        sync = vllm.server.syncs[0]
    assert vllm.server.version == 1 and sync["in_flight"] == 1
    if interrupt:  # answered at once; the request went on to generate its whole 1.5 s
        assert sync["mode"] == "keep" and took < 0.5 and done[0] >= 1.4
    else:  # answered once the request had finished
        assert sync["mode"] == "wait" and took >= 1.0 and done[0] <= 0.3 + took + 0.2


def test_a_frozen_request_generates_nothing_until_resumed():
    with VLLMThread(lambda ctx: Reply(text="hello", delay=1.0)) as vllm:
        client = InferenceClient(vllm.url, timeout=30)
        thread, done = _in_background(client)
        client.post("/pause", query={"mode": "keep"})
        time.sleep(1.5)
        assert not done  # frozen: 0.3 s of its 1 s generated
        client.post("/resume")
        thread.join(10)
    assert done and done[0] >= 2.4


def test_a_held_reply_waits_for_the_version(tmp_path):
    with VLLMThread(lambda ctx: Held(text="late", until_version=1)) as vllm:
        client = InferenceClient(vllm.url, timeout=30, interrupt=True)
        thread, done = _in_background(client)
        time.sleep(0.5)
        assert not done
        client.reload_weights(tmp_path)
        thread.join(10)
    assert done


def _ctx(row: dict, *turns: str) -> Context:
    prompt = f"<|im_start|>user\n<issue>\n{row['problem_statement']}\n</issue><|im_end|>\n"
    for t in turns:
        prompt += f"<|im_start|>assistant\n{t}<|im_end|>\n<|im_start|>user\nresult<|im_end|>\n"
    return Context("completions", {}, prompt + "<|im_start|>assistant\n", len(turns))


def test_the_plan_script_numbers_each_rollout_and_alternates_fixing_per_instance():
    rows = fixable_rows()
    script = PlanScript(rows, seed=3, seconds=lambda rng, iid, v: 8.0, hold=lambda iid, v: 2 if v == 0 else 0)
    first = script(_ctx(rows[0]))
    assert "qsplan-0" in first.text and first.delay == 2.0  # 8 s over the 4 calls of a fixing rollout
    second = script(_ctx(rows[0], first.text))
    assert '"read_file"' in second.text and isinstance(second, Held) and second.until_version == 2
    assert '"edit"' in script(_ctx(rows[0], first.text, second.text)).text
    other = script(_ctx(rows[0]))  # the second attempt at the instance does not fix it
    assert "qsplan-1" in other.text and other.delay == pytest.approx(8.0 / 3)
    assert script(_ctx(rows[0], other.text, "read")).text == "Done."
    assert [p.fixes for p in script.plans] == [True, False]
    assert script(Context("completions", {}, "def add(a, b):", 0)).text == "ok"  # the sync's probe
