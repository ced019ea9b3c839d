"""COLOCATE's server side on the real embedded vLLM CPU server: the sleep routes in the order the trainer's turns send
them (sleep; wake the weights; push new weights; wake the KV cache), the new weights served after it, and the CPU
build's refusal of ``--enable-sleep-mode`` (why the launcher leaves the flag out on CPU: there the routes pause and
resume, and release no memory)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from qwen_swe import paths, preflight
from qwen_swe.config import settings as config
from qwen_swe.errors import InferenceError
from qwen_swe.inference.client import InferenceClient
from qwen_swe.inference.embedded_server import EMBEDDED_SERVED_NAME, embedded_serve_config
from qwen_swe.inference.server import VLLMServer
from qwen_swe.inference.sleep import KV_CACHE, WEIGHTS, ServerSleep, sleep_mode_of

pytestmark = pytest.mark.vllm


def _probe(client: InferenceClient) -> tuple[list[int], list[float]]:
    body = client.post(
        "/v1/completions",
        {
            "model": EMBEDDED_SERVED_NAME,
            "prompt": "The capital of France is",
            "max_tokens": 8,
            "temperature": 0.0,
            "return_token_ids": True,
            "logprobs": 0,
        },
    )
    choice = body["choices"][0]
    return choice["token_ids"], choice["logprobs"]["token_logprobs"]


def _changed_weights(folder: Path) -> Path:
    import torch
    from safetensors.torch import load_file, save_file

    original = paths.embedded_model_dir()
    folder.mkdir()
    weights = load_file(str(original / "model.safetensors"))
    for name in weights:  # silence every MLP of the first ten layers
        if "down_proj" in name and int(name.split(".")[2]) < 10:
            weights[name] = torch.zeros_like(weights[name])
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(original / "config.json", folder / "config.json")
    return folder


def test_the_turns_routes_in_order_then_the_new_weights_are_served(embedded_vllm: str, tmp_path: Path):
    client = InferenceClient(embedded_vllm, timeout=300)
    server = ServerSleep(client, timeout=300)
    assert sleep_mode_of(client.get("/server_info", query={"config_format": "json"})) is None  # a CPU server
    preflight.check_sleep_mode(config.Settings.build(vllm_url=embedded_vllm, colocate=True))  # so it passes
    before = _probe(client)
    assert not server.is_sleeping()
    try:
        server.sleep()  # the trainer's turn
        assert server.is_sleeping()
        server.wake_up((WEIGHTS,))  # the weights back, the KV cache still released
        assert server.is_sleeping(), "nothing may be served before the KV cache is back"
        client.reload_weights(_changed_weights(tmp_path / "v000001"))  # the push
        server.wake_up((KV_CACHE,))
        assert not server.is_sleeping()
        assert _probe(client) != before  # the pushed weights are the ones served
    finally:
        if server.is_sleeping():
            server.wake_up()
        client.reload_weights(paths.embedded_model_dir())  # the server is shared by the session: leave it as it was
    assert _probe(client) == before
    assert client.get("/is_paused") == {"is_paused": False}


def test_vllms_cpu_build_refuses_sleep_mode(tmp_path: Path):
    """The evidence behind the launcher's choice: ``--enable-sleep-mode`` stops the CPU build at start."""
    colocated = config.load_settings([], env={}).replace(colocate=True)
    serve = embedded_serve_config(colocated)
    assert serve.sleep_mode and "--enable-sleep-mode" not in serve.argv()  # what the launcher sends on CPU
    serve = dataclasses.replace(serve, extra_args=("--enable-sleep-mode",))  # what it would be on a GPU
    with (
        VLLMServer(serve, tmp_path / "vllm.log") as server,
        pytest.raises(InferenceError, match="exited with code"),
    ):
        server.start(300)
    assert "Sleep mode is not supported on current platform" in (tmp_path / "vllm.log").read_text()


def test_two_trainer_ranks_take_turns_with_the_real_server(embedded_vllm: str, tmp_path: Path):
    """The built-in trainer under torchrun (2 gloo ranks, each parking its own FSDP2 shard) with COLOCATE against the
    real server: the server's sleep routes answer the trainer's turns, the run trains and syncs as in split mode (the
    test's driver makes the rollouts), and the server serves again when it ends."""
    from tests.integration.test_trainer_fsdp import metrics_rows, run_trainer
    from tests.tiny_model import tiny_model_dir

    server = ServerSleep(InferenceClient(embedded_vllm, timeout=300), timeout=300)
    out = tmp_path / "run"
    try:
        run_trainer(out, str(tiny_model_dir()), steps=2, colocate=True, vllm_url=embedded_vllm)
        assert not server.is_sleeping()
    finally:
        if server.is_sleeping():
            server.wake_up()  # the server is shared by the session
    events = [json.loads(line) for line in (out / "driver_events.jsonl").read_text().splitlines()]
    kinds = [(e["kind"], e.get("step"), e["version"]) for e in events]
    assert kinds == [("generate", 0, 0), ("sync", None, 1), ("generate", 1, 1), ("sync", None, 2)]
    for row in metrics_rows(out):
        assert row["colocate/sleep_seconds"] > 0 and row["colocate/wake_seconds"] > 0
        assert row["colocate/offload_seconds"] > 0 and row["colocate/reload_seconds"] > 0
        assert row["approx_kl"] < 1e-8  # the weights pushed after the reload are the ones trained
