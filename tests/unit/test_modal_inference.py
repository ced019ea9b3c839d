"""The Modal deployment, inspected offline with no credentials: GPUs, volumes, timeouts, the served command and the
reload path. Modal's private attributes are read in one helper only (they may move between modal releases)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qwen_swe import paths
from qwen_swe.inference.settings import DEFAULT_MODEL

pytest.importorskip("modal")
MODULE = "qwen_swe.inference.modal_app"
DEPLOY_KEYS = (
    "MODEL",
    "TP",
    "MODAL_GPU",
    "MODAL_GPU_COUNT",
    "MODAL_APP_NAME",
    "LORA_RANK",
    "SERVED_MODEL_NAME",
    "MAX_MODEL_LEN",
    "MODAL_HF_SECRET",
    "VLLM_API_KEY",
)


@pytest.fixture
def mi(monkeypatch, tmp_path):
    """The module imported fresh in a scrubbed environment: no Modal token, no ~/.modal.toml, no deploy settings."""
    for key in list(os.environ):
        if key.startswith("MODAL_") or key in DEPLOY_KEYS:
            monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path))
    sys.modules.pop(MODULE, None)
    yield importlib.import_module(MODULE)
    sys.modules.pop(MODULE, None)


def modal_spec(cls):
    """(function spec, {method: partial-function params}) of a modal.Cls, from modal 1.6's private objects."""
    spec = cls._get_class_service_function()._spec_
    params = {}
    for name, partial in cls._get_partial_functions().items():
        raw = next(getattr(partial, a) for a in dir(partial) if a.startswith("_sync_original"))
        params[name] = raw.params
    return spec, params


def flag(argv, name):
    return argv[argv.index(name) + 1]


def test_gpu_volumes_and_timeouts(mi):
    spec, params = modal_spec(mi.Server)
    assert mi.app.name == "qwen-swe-vllm"
    assert spec.gpus == "A100-80GB:8"
    assert set(spec.volumes) == {"/root/.cache/huggingface", "/root/.cache/vllm", "/weights"}
    assert repr(spec.volumes["/weights"]) == "modal.Volume.from_name('qwen-swe-weights')"
    assert spec.secrets == []  # Qwen3-Coder is public; MODAL_HF_SECRET adds one for gated models
    web = params["serve"].webhook_config
    assert web.web_server_port == mi.PORT == 8000
    assert web.web_server_startup_timeout == mi.STARTUP_TIMEOUT >= 20 * 60
    assert web.requested_suffix == mi.APP_NAME
    assert params["reload"].webhook_config is None  # a plain Modal method: no 150 s HTTP limit on reloads
    assert "start" in params  # vLLM starts with the container (@modal.enter), also when a reload wakes it
    assert mi.FUNCTION_TIMEOUT > mi.WEB_REQUEST_LIMIT and mi.MAX_INPUTS >= 64


def test_served_command_matches_the_local_launcher(mi, monkeypatch):
    with pytest.raises(mi.ConfigError, match="VLLM_API_KEY is unset"):  # no open server behind a public URL
        mi.serve_config()
    monkeypatch.setenv("VLLM_API_KEY", "k" * 43)
    argv = mi.serve_config().argv()
    assert flag(argv, "--middleware") == "qwen_swe.inference.server_auth.RequireKey"
    assert "k" * 43 not in " ".join(argv) and mi.serve_config().env()["VLLM_API_KEY"] == "k" * 43
    assert argv[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    assert flag(argv, "--model") == DEFAULT_MODEL
    assert flag(argv, "--tool-call-parser") == "qwen3_coder" and "--enable-auto-tool-choice" in argv
    assert flag(argv, "--tensor-parallel-size") == "8"  # TP follows the GPU count
    assert flag(argv, "--port") == str(mi.PORT) and flag(argv, "--host") == "0.0.0.0"
    assert mi.serve_config().env()["VLLM_SERVER_DEV_MODE"] == "1"
    assert mi.APP_NAME == "qwen-swe-vllm"  # the web server's label: https://<workspace>--qwen-swe-vllm.modal.run/v1


def test_gpu_and_lora_from_env(monkeypatch, mi):
    monkeypatch.setenv("MODAL_GPU", "H100")
    monkeypatch.setenv("MODAL_GPU_COUNT", "4")
    monkeypatch.setenv("LORA_RANK", "16")
    monkeypatch.setenv("VLLM_API_KEY", "k" * 43)
    sys.modules.pop(MODULE, None)
    mod = importlib.import_module(MODULE)
    spec, _ = modal_spec(mod.Server)
    assert "Secret.from_dict([VLLM_API_KEY])" in map(repr, spec.secrets)  # the key reaches the container
    argv = mod.serve_config().argv()
    assert spec.gpus == "H100:4" and flag(argv, "--tensor-parallel-size") == "4"
    assert "--enable-lora" in argv and mod.serve_config().env()["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"


def test_reload_paths_stay_inside_the_weights_volume(mi):
    assert mi.weights_path("step_000003") == "/weights/step_000003"
    assert mi.weights_path("/weights/lora_1") == "/weights/lora_1"
    for bad in ("/etc", "/weights/../etc", "../x"):
        with pytest.raises(ValueError, match="weights Volume"):
            mi.weights_path(bad)


def test_reload_calls_the_sync_protocol_on_the_local_server(mi):
    """The reload entry point's HTTP sequence, against a stand-in for the vLLM routes on loopback."""
    import http.server
    import json
    import threading

    calls = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            calls.append((self.path, json.loads(body) if body else None))
            out = json.dumps({"success": True} if self.path == "/reset_prefix_cache" else {"status": "ok"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        full = mi.reload_server("step_000003", base_url=url)
        lora = mi.reload_server("lora_000003", "policy", base_url=url)
    finally:
        srv.shutdown()
        srv.server_close()
    assert full == {"path": "/weights/step_000003", "lora_name": None, "version": 1}
    assert lora["version"] == 1 and lora["path"] == "/weights/lora_000003"
    paths = [p for p, _ in calls]
    assert paths == [
        "/pause?mode=wait",
        "/collective_rpc",
        "/reset_prefix_cache",
        "/resume",
        "/pause?mode=wait",
        "/v1/load_lora_adapter",
        "/reset_prefix_cache",
        "/resume",
    ]
    assert calls[1][1]["method"] == "reload_weights"
    assert calls[1][1]["kwargs"] == {"weights_path": "/weights/step_000003"}
    assert calls[5][1] == {"lora_name": "policy", "lora_path": "/weights/lora_000003", "load_inplace": True}


def test_deploy_without_token_fails_fast(tmp_path: Path):
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "modal", "deploy", "examples/qwen_swe/modal_inference.py"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=paths.REPO_ROOT,
    )
    assert out.returncode != 0
    assert "Token missing" in out.stdout + out.stderr, out.stdout + out.stderr
