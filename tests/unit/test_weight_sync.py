"""Weight sync's one interface: the factory's choice, PathReload's HTTP sequence and the probe metrics, against a
stand-in for vLLM's routes on loopback (real HTTP through the project's own client)."""

from __future__ import annotations

import http.server
import json
import math
import threading
from pathlib import Path

import pytest

from qwen_swe.inference.client import InferenceClient
from qwen_swe.inference.settings import InferenceSettings
from qwen_swe.inference.weight_sync import ModalVolume, PathReload, ProbedSync, make_weight_sync


@pytest.fixture()
def vllm_routes():
    """Records every POST; the probe's logprob moves by -0.5 after each reload, as new weights would."""
    state = {"calls": [], "reloads": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            state["calls"].append((self.path, json.loads(body) if body else None))
            if self.path == "/collective_rpc":
                state["reloads"] += 1
            if self.path == "/v1/completions":
                lp = -10.0 - 0.5 * state["reloads"]
                out = {"choices": [{"prompt_logprobs": [None, {"7": {"logprob": lp}}, {"9": {"logprob": -1.0}}]}]}
            else:
                out = {"success": True}
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", state
    finally:
        srv.shutdown()
        srv.server_close()


def test_the_settings_pick_the_sync():
    client = InferenceClient("http://127.0.0.1:9")
    assert isinstance(make_weight_sync(InferenceSettings(), client), PathReload)
    assert isinstance(make_weight_sync(InferenceSettings(vllm_url="http://gpu:8000/v1"), client), PathReload)
    assert isinstance(make_weight_sync(InferenceSettings(vllm_url="https://ws--app.modal.run/v1"), client), ModalVolume)
    forced = InferenceSettings(vllm_url="https://ws--app.modal.run/v1", weight_sync="path")
    assert isinstance(make_weight_sync(forced, client), PathReload)


def test_path_reload_runs_vllms_sequence_and_the_probe_sees_new_weights(vllm_routes, tmp_path: Path):
    url, state = vllm_routes
    client = InferenceClient(url)
    folder = tmp_path / "v000001"
    folder.mkdir()
    metrics = ProbedSync(PathReload(client), client, "policy").push(folder, 1)
    paths = [p for p, _ in state["calls"]]
    assert paths == [
        "/v1/completions",
        "/pause?mode=wait",
        "/collective_rpc",
        "/reset_prefix_cache",
        "/resume",
        "/v1/completions",
    ]
    assert state["calls"][2][1]["kwargs"] == {"weights_path": str(folder.resolve())}
    assert metrics["sync/version"] == 1 and metrics["sync/reload_seconds"] >= 0.0
    assert metrics["sync/probe_logprob_before"] == -11.0 and metrics["sync/probe_logprob_after"] == -11.5


def test_a_server_without_prompt_logprobs_gives_a_nan_probe_not_a_failure(tmp_path: Path):
    client = InferenceClient("http://127.0.0.1:9", timeout=2.0)  # nothing listens: the probe is diagnostic only

    class Nothing:
        def push(self, folder, version):
            return {}

    metrics = ProbedSync(Nothing(), client, "policy").push(tmp_path, 3)
    assert math.isnan(metrics["sync/probe_logprob_before"]) and metrics["sync/version"] == 3
