"""The real embedded vLLM CPU server started as a run starts it (``launcher.serving``: a key on every route): an
unauthenticated or wrongly keyed call to a chat or an admin route is refused and has no effect; with the key, chat and
the whole weight-sync protocol (pause, collective_rpc reload, reset_prefix_cache, resume) work."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from qwen_swe import paths
from qwen_swe.config import settings as config
from qwen_swe.inference.client import InferenceClient
from qwen_swe.inference.embedded_server import EMBEDDED_SERVED_NAME, serving

pytestmark = pytest.mark.vllm

CHAT = {
    "model": EMBEDDED_SERVED_NAME,
    "messages": [{"role": "user", "content": "Say hi."}],
    "max_tokens": 4,
    "temperature": 0.0,
}
# (method, path, body): the OpenAI routes vLLM's --api-key guards, and the routes VLLM_SERVER_DEV_MODE=1 adds that it
# does not (vLLM 0.32 guards /v1, /v2, /inference and /cohere only)
ROUTES = [
    ("POST", "/v1/chat/completions", CHAT),
    ("POST", "/v1/completions", {**CHAT, "prompt": "hi"}),
    ("GET", "/v1/models", None),
    ("POST", "/pause", None),
    ("POST", "/resume", None),
    ("POST", "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": "/nonexistent"}}),
    ("POST", "/reset_prefix_cache", None),
    ("POST", "/tokenize", {"model": EMBEDDED_SERVED_NAME, "prompt": "x"}),
    ("GET", "/metrics", None),
    ("GET", "/is_paused", None),
    ("GET", "/version", None),
]


def _call(root: str, method: str, path: str, body: object, key: str | None) -> int:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(
            urllib.request.Request(root + path, data=data, method=method, headers=headers), timeout=120
        ) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_every_route_of_a_started_server_needs_its_key(tmp_path: Path, record_property):
    settings = config.load_settings([], env={})
    with serving(settings, log_dir=tmp_path / "logs") as served:
        key, root = served.inference.api_key, served.inference.url.removesuffix("/v1")
        assert key and len(key) >= 32
        refused = {f"{m} {p}": (_call(root, m, p, b, None), _call(root, m, p, b, "wrong")) for m, p, b in ROUTES}
        record_property("unauthenticated", json.dumps(refused))
        print("\n".join(f"{route}: no key {a}, wrong key {b}" for route, (a, b) in refused.items()))
        assert all(codes == (401, 401) for codes in refused.values()), refused
        assert _call(root, "GET", "/health", None, None) == 200  # liveness only

        client = InferenceClient(served.inference.url, timeout=300, api_key=key)
        assert EMBEDDED_SERVED_NAME in client.models()
        assert client.post("/v1/chat/completions", CHAT)["choices"][0]["message"]  # not paused by the refused /pause
        assert client.reload_weights(paths.embedded_model_dir()) == 1  # the sync protocol, every admin route, keyed
        assert client.post("/v1/chat/completions", CHAT)["choices"][0]["message"]
