"""The key middleware a started vLLM server runs (``inference/server_auth.py``), driven as ASGI: every route but
``GET /health`` needs the Bearer key, admin routes included; the launcher passes it in the environment only."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from qwen_swe.config import settings as config
from qwen_swe.inference import embedded_server
from qwen_swe.inference.server_auth import KEY_ENV, MIDDLEWARE, RequireKey

KEY = "k3y-" + "x" * 40


async def _app(scope, receive, send):  # the server behind the middleware: answers 200 to whatever reaches it
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _status(guard: RequireKey, method: str, path: str, auth: str | None) -> int:
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "http.request", "body": b""}

    headers = [(b"authorization", auth.encode())] if auth is not None else []
    asyncio.run(guard({"type": "http", "method": method, "path": path, "headers": headers}, receive, send))
    return sent[0]["status"]


@pytest.mark.parametrize(
    "method,path",
    [
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/completions"),
        ("POST", "/pause"),
        ("POST", "/resume"),
        ("POST", "/collective_rpc"),
        ("POST", "/reset_prefix_cache"),
        ("POST", "/v1/load_lora_adapter"),
        ("GET", "/metrics"),
        ("POST", "/tokenize"),
        ("GET", "/v1/models"),
        ("POST", "/health"),
    ],
)
def test_every_route_needs_the_key(monkeypatch, method, path):
    monkeypatch.setenv(KEY_ENV, KEY)
    guard = RequireKey(_app)
    for auth in (None, "", "Bearer", "Bearer wrong", f"Basic {KEY}", KEY):
        assert _status(guard, method, path, auth) == 401, (method, path, auth)
    assert _status(guard, method, path, f"Bearer {KEY}") == 200
    assert _status(guard, method, path, f"bearer {KEY}") == 200


def test_health_answers_anyone_and_a_missing_key_stops_the_server(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    assert _status(RequireKey(_app), "GET", "/health", None) == 200
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(RuntimeError, match=KEY_ENV):
        RequireKey(_app)


def test_the_launcher_passes_the_key_in_the_environment_only(tmp_path: Path):
    serve = embedded_server.embedded_serve_config(
        config.load_settings([], env={}), port=8123, model_dir=tmp_path, api_key=KEY
    )
    argv, env = serve.argv(), serve.env()
    assert argv[argv.index("--middleware") + 1] == MIDDLEWARE and KEY not in " ".join(argv)
    assert env[KEY_ENV] == KEY and KEY not in serve.shell()
    assert (
        "--middleware"
        not in embedded_server.embedded_serve_config(
            config.load_settings([], env={}), port=8123, model_dir=tmp_path
        ).argv()
    )
