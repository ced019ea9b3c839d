"""The key on every route of a vLLM server this project starts (``--middleware`` of vLLM's OpenAI server).

vLLM's own ``--api-key`` guards only paths under /v1, /v2, /inference and /cohere (vLLM 0.32,
``entrypoints/serve/middleware/authenticate.py``); the routes ``VLLM_SERVER_DEV_MODE=1`` turns on for weight sync
(/pause, /resume, /collective_rpc, /reset_prefix_cache), /tokenize, /metrics and the rest answer anyone. This
middleware asks the same Bearer key (``VLLM_API_KEY`` in the server's environment, never on its command line) of
every request but ``GET /health``, which reveals and changes nothing and is what readiness probes call.

Pure ASGI and stdlib only: it is imported inside vLLM's environment, from this repository on PYTHONPATH.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

KEY_ENV = "VLLM_API_KEY"
OPEN = frozenset({("GET", "/health")})
MIDDLEWARE = f"{__name__}.RequireKey"

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class RequireKey:
    """Refuse (401) any HTTP or websocket request without ``Authorization: Bearer <VLLM_API_KEY>``."""

    def __init__(self, app: Any) -> None:
        key = os.environ.get(KEY_ENV)
        if not key:  # a middleware that guards nothing must not start quietly
            raise RuntimeError(f"{MIDDLEWARE} needs {KEY_ENV} in the server's environment")
        self.app = app
        self._digest = hashlib.sha256(key.encode()).digest()

    def allowed(self, scope: Scope) -> bool:
        if (scope.get("method", "GET"), scope.get("path", "")) in OPEN:
            return True
        headers = dict(scope.get("headers") or ())
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        given = hashlib.sha256(token.strip().encode()).digest()
        return scheme.lower() == "bearer" and hmac.compare_digest(given, self._digest)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.allowed(scope):
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            body = json.dumps(
                {"error": {"message": "a valid Bearer key is required", "type": "unauthorized", "code": 401}}
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
                }
            )
            await send({"type": "http.response.body", "body": body})
