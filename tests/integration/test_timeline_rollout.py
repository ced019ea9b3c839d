"""A real rollout records where its time went (issue 40): the engine with a real Docker sandbox, the real proxy, real
qwen-code and the real grader, against the scripted model, which answers each call after a delay and reports what
vLLM 0.32 reports with --enable-prompt-tokens-details and --enable-per-request-metrics.

Checked: the spans come in the order a rollout meets them (boot, agent set-up and start, model calls with the tool
gaps between them named by the tools the model called, agent exit and clean-up, diff, teardown, grade), one after
another, inside the attempt's own wall time; each model call carries its tokens and the server's figures; the step's
summary of them is what the spans say; the rollout dump carries the timeline.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from qwen_swe.config.settings import Settings
from qwen_swe.data.prompts import build_prompt
from qwen_swe.data.sample import Sample, Status, run_of
from qwen_swe.paths import embedded_model_dir
from qwen_swe.rollout.engine import RolloutEngine
from qwen_swe.rollout.progress import BatchStats
from qwen_swe.rollout.record import dump_rollouts
from qwen_swe.rollout.timeline import summarize
from tests.scripted_server import Reply, ScriptedServer, smollm2_tokenizer
from tests.task_pack import gold_edit, replayable_task
from tests.toolcall_text import hermes_call

pytestmark = [pytest.mark.docker, pytest.mark.agent]

DELAY = 0.3  # seconds the scripted model takes per call
UNCACHED = 16  # the scripted server says all but the last 16 prompt tokens were in its prefix cache
SERVER_METRICS = {"queue_time_ms": 0.5, "time_to_first_token_ms": 12.0, "generation_time_ms": 30.0}


class ReportingServer(ScriptedServer):
    """The scripted model, its ``/v1/completions`` answers carrying ``usage.prompt_tokens_details.cached_tokens``
    and ``metrics`` as vLLM's do when the server runs with those flags."""

    def decorate(self, answer: dict[str, Any]) -> dict[str, Any]:
        prompt = answer["usage"]["prompt_tokens"]
        answer["usage"]["prompt_tokens_details"] = {"cached_tokens": max(0, prompt - UNCACHED)}
        answer["metrics"] = dict(SERVER_METRICS, mean_itl_ms=1.0)
        return answer


@pytest.fixture(scope="module")
def task() -> dict[str, Any]:
    return replayable_task()


async def _rollout(task: dict, script: list[str], out: Path, run_id: str) -> tuple[Sample, float]:
    async with ReportingServer([Reply(t, delay=DELAY) for t in script], tokenizer=smollm2_tokenizer()) as server:
        assert server.url is not None
        settings = Settings.build(
            vllm_url=server.url,
            model=str(embedded_model_dir()),
            served_model_name="scripted",
            max_turns=6,
            agent_timeout=300.0,
            output_dir=out,
            run_id=run_id,
        )
        engine = RolloutEngine(settings, upstream=server.url, model=settings.model_name, served_model="scripted")
        await engine.start()
        try:
            sample = Sample(group_index=0, index=0, prompt=build_prompt(task), metadata=dict(task))
            t0 = time.monotonic()
            await engine.run_sample(sample, BatchStats())
            return sample, time.monotonic() - t0
        finally:
            await engine.stop()


def test_a_rollout_records_its_spans_in_order_within_its_wall_time(task, run_id, tmp_path):
    edit = gold_edit(task["patch"])
    assert edit is not None  # replayable_task picks a task with one
    path, old, new = edit
    script = [
        hermes_call("read_file", file_path=f"/testbed/{path}"),
        hermes_call("edit", file_path=f"/testbed/{path}", old_string=old, new_string=new),
        "Fixed the bug.",
    ]
    sample, wall = asyncio.run(_rollout(task, script, tmp_path / "run", run_id))
    run = run_of(sample)
    assert (sample.status, sample.reward) == (Status.COMPLETED, 1.0), run.drop_detail
    timeline = run.timeline
    assert timeline is not None
    spans, seconds = timeline["spans"], timeline["seconds"]
    kinds = [s["kind"] for s in spans]

    # the order a rollout meets them; the agent's model calls with the gaps between them
    assert kinds[:3] == ["boot", "agent_setup", "agent_start"], kinds
    assert kinds[-5:] == ["agent_exit", "agent_cleanup", "diff", "teardown", "grade"], kinds
    calls = kinds[3:-5]
    assert calls[0::2] == ["model"] * len(calls[0::2]) and len(calls) % 2 == 1, calls
    assert len(calls[0::2]) == len(run.conversation["calls"]) >= 3  # every model call the proxy served
    gaps = [s for s in spans if s["kind"] in ("tool", "agent")]
    assert [g["attrs"].get("tools") for g in gaps[:2]] == [["read_file"], ["edit"]]  # the tools the model called

    # one after another, inside the attempt's wall time (measured around it here)
    assert all(a["end"] <= b["start"] + 1e-3 for a, b in zip(spans, spans[1:])), spans
    assert spans[0]["start"] >= 0.0 and spans[-1]["end"] <= seconds + 1e-3 and seconds <= wall + 1e-3
    assert all(s["end"] - s["start"] > 0 for s in spans if s["kind"] in ("boot", "model", "grade", "diff"))

    # each model call: its tokens, the server's share of its time, what the server reported
    models = [s for s in spans if s["kind"] == "model"]
    for m in models:
        a = m["attrs"]
        assert a["status"] == 200 and a["generated_tokens"] > 0 and a["prompt_tokens"] > UNCACHED
        assert a["cached_tokens"] == a["prompt_tokens"] - UNCACHED
        assert (a["queue_ms"], a["prefill_ms"], a["decode_ms"]) == (0.5, 12.0, 30.0)
        assert DELAY <= a["server_seconds"] <= m["end"] - m["start"] + 1e-3
    assert [m["attrs"]["turn"] for m in models] == list(range(len(models)))
    # the proxy splices: each prompt after the first starts with the whole previous prompt and reply
    reused = [m["attrs"]["reused_prefix_tokens"] for m in models]
    previous = [m["attrs"]["prompt_tokens"] + m["attrs"]["generated_tokens"] for m in models]
    assert reused[0] == 0 and all(r >= p for r, p in zip(reused[1:], previous)), (reused, previous)

    # the step's figures are what the spans say
    step = summarize([timeline])
    assert step is not None
    prompt = sum(m["attrs"]["prompt_tokens"] for m in models)
    assert step.cache_hit_rate == pytest.approx((prompt - UNCACHED * len(models)) / prompt)
    busy = sum(m["end"] - m["start"] for m in models)
    assert step.model_busy == pytest.approx(busy / seconds, rel=1e-3) and 0 < step.model_busy < 1
    assert sum(step.shares.values()) == pytest.approx(1.0) and step.tail == 1.0

    # the rollout's record carries it
    dump = tmp_path / "step.jsonl"
    dump_rollouts(dump, [[sample]], [])
    assert json.loads(dump.read_text())["timeline"] == json.loads(json.dumps(timeline))
