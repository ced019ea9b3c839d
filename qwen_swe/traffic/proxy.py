"""The recording OpenAI-compatible proxy between the agent and the inference server.

One session per rollout; its id is in the base URL the agent gets (``{root}/s/{id}/v1``), because the
agent only lets us set a base URL. Two modes:

* ``tokens`` (default when a tokenizer is given): the proxy owns the session's token history. It renders
  each prompt with the served chat template, splices in the ids the model sampled on earlier turns
  (``sessions.PromptBuilder``), calls the server's ``/v1/completions`` with token ids, parses tool calls
  from the completion (``toolcalls``) and answers as a chat completion (``token_mode.py``). The training
  sequence is then exactly what the model was conditioned on and produced.
* ``forward``: the chat request goes upstream with ``return_token_ids`` and ``logprobs`` added, the answer
  streams back unchanged, and the turn is recorded from it (``forward.py``). Works in front of any vLLM as-is,
  but the agent's resent history re-tokenises differently, so trajectories drift.

Every call becomes a ``Turn`` (errors too: upstream statuses >= 400 are passed on, timeouts become 504;
``upstream.py``). This module holds the lifecycle, the sessions and the routes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp
from aiohttp import web

from qwen_swe.errors import ProxyError, UpstreamFailure
from qwen_swe.traffic.endpoint import SessionEndpoint, bound_session
from qwen_swe.traffic.forward import chat_forward
from qwen_swe.traffic.sessions import PromptBuilder, Session
from qwen_swe.traffic.token_mode import TokenMode
from qwen_swe.traffic.toolcalls import FORMATS
from qwen_swe.traffic.trajectory import Turn
from qwen_swe.traffic.upstream import Upstream, error_body

log = logging.getLogger("qwen_swe.proxy")


class RecordingProxy:
    """``async with RecordingProxy(url, model=...) as proxy:``
    ``s = proxy.open_session(); ...; proxy.close_session(s.id)``."""

    def __init__(
        self,
        upstream: str,
        *,
        model: str | None = None,
        tokenizer_path: str | None = None,
        mode: str | None = None,
        request_timeout: float = 600.0,
        tool_parser: str = "hermes",
        chat_template: str | None = None,
        tokenizer: Any = None,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
    ) -> None:
        mode = mode or ("tokens" if (tokenizer_path or tokenizer is not None) else "forward")
        if mode not in ("tokens", "forward"):
            raise ProxyError(f"mode={mode!r}: use 'tokens' or 'forward'")
        if mode == "tokens" and not (tokenizer_path or tokenizer is not None):
            raise ProxyError("mode='tokens' needs tokenizer_path (the served model's folder) to render prompts")
        if tool_parser not in FORMATS:
            raise ProxyError(f"tool_parser={tool_parser!r}: use one of {', '.join(FORMATS)}")
        root = upstream.rstrip("/")
        self.upstream = root if root.endswith("/v1") else root + "/v1"
        self.model, self.mode, self.tool_parser = model, mode, tool_parser
        self.request_timeout = request_timeout
        self.weight_version: Any = None  # set by the rollout before each batch; recorded on every turn
        self.next_weight_version: Any = None  # the version a sync is moving to (PARTIAL_ROLLOUTS: calls go on)
        self._tokenizer_path, self._tokenizer, self._chat_template = tokenizer_path, tokenizer, chat_template
        self._host, self._port = host, port
        self._server = Upstream(self.upstream, model=model, request_timeout=request_timeout, api_key=api_key)
        self._tokens: TokenMode | None = None
        # Rendering and tokenising run on the proxy's own threads: the default executor is shared with callers
        # that park blocking calls there for a whole agent run (docker exec), which would starve the proxy.
        self._executor: ThreadPoolExecutor | None = None
        self._sessions: dict[str, Session] = {}
        self._closed: set[str] = set()
        self._endpoints: dict[str, SessionEndpoint] = {}  # session id -> its socket, where it has one
        self._runner: web.AppRunner | None = None
        self.root: str | None = None

    # --- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> str:
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="proxy-render")
        if self.mode == "tokens":
            tokenizer = self._tokenizer
            if tokenizer is None:
                from transformers import AutoTokenizer

                tokenizer = await self._offload(AutoTokenizer.from_pretrained, self._tokenizer_path)
            builder = PromptBuilder(tokenizer, self._chat_template)
            self._tokens = TokenMode(builder, self._server, self.tool_parser, self._offload)
        await self._server.start()
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/s/{sid}/v1/chat/completions", self._chat)
        app.router.add_get("/s/{sid}/v1/models", self._models)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.root = f"http://{host}:{port}"
        return self.root

    async def stop(self) -> None:
        try:
            if self._runner is not None:
                await self._runner.cleanup()
        finally:
            self._runner = None
            await self._server.close()
            if self._executor is not None:
                self._executor.shutdown(wait=False, cancel_futures=True)
                self._executor = None

    async def _offload(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def __aenter__(self) -> RecordingProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    # --- sessions --------------------------------------------------------------------------------
    def open_session(self, meta: dict[str, Any] | None = None, seed: int | None = None) -> Session:
        """``seed``: every model call of the session samples with a seed derived from it and the turn's index
        (unless the agent sent its own), so the same weights repeat the same attempt."""
        if self.root is None:
            raise ProxyError("open_session before start(): start the proxy first")
        sid = uuid.uuid4().hex
        session = Session(id=sid, base_url=f"{self.root}/s/{sid}/v1", meta=dict(meta or {}), seed=seed)
        self._sessions[sid] = session
        return session

    def close_session(self, sid: str) -> list[Turn]:
        """Take the session's turns (in call order); later requests to it get 410."""
        session = self._sessions.pop(sid, None)
        if session is None:
            raise ProxyError(f"session {sid} is not open (unknown or already closed)")
        self._closed.add(sid)
        return sorted(session.turns, key=lambda t: t.index)

    def restart_session(self, sid: str) -> Session:
        """Close ``sid``, dropping its turns (later requests to it get 410), and open an empty session with the same
        meta and seed: an agent run that is started again begins from nothing the discarded run sent or received."""
        old = self._sessions.get(sid)
        if old is None:
            raise ProxyError(f"session {sid} is not open (unknown or already closed)")
        if old.bug is not None:  # a proxy bug is never discarded with the run it hit
            raise old.bug
        self.close_session(sid)
        new = self.open_session(old.meta, seed=old.seed)
        endpoint = self._endpoints.pop(sid, None)
        if endpoint is not None:  # the container keeps its socket; it now serves the new session
            endpoint.binding.sid = new.id
            self._endpoints[new.id] = endpoint
        return new

    def endpoint(self, sid: str, parent: str | None = None) -> SessionEndpoint:
        """A Unix socket serving only session ``sid`` (``async with``; see ``endpoint.py``): what a rollout container
        with no network mounts."""
        if sid not in self._sessions:
            raise ProxyError(f"session {sid} is not open (unknown or already closed)")
        endpoint = SessionEndpoint(self._chat, self._models, sid, parent=parent, on_stop=self._forget)
        self._endpoints[sid] = endpoint
        return endpoint

    def _forget(self, endpoint: SessionEndpoint) -> None:
        if self._endpoints.get(endpoint.binding.sid) is endpoint:
            del self._endpoints[endpoint.binding.sid]

    def session(self, sid: str) -> Session:
        return self._sessions[sid]

    @property
    def tokenizer(self) -> Any:
        return self._tokens.builder.tokenizer if self._tokens else None

    # --- routes ----------------------------------------------------------------------------------
    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "sessions": len(self._sessions)})

    def _lookup(self, request: web.Request) -> Session | web.Response:
        sid = bound_session(request)
        session = self._sessions.get(sid)
        if session is not None:
            return session
        status = 410 if sid in self._closed else 404
        return web.json_response(
            error_body(f"session {sid} is {'closed' if status == 410 else 'unknown'}", "invalid_request_error", status),
            status=status,
        )

    async def _models(self, request: web.Request) -> web.Response:
        found = self._lookup(request)
        if isinstance(found, web.Response):
            return found
        try:
            status, raw = await self._server.models()
            return web.Response(status=status, body=raw, content_type="application/json")
        except (TimeoutError, aiohttp.ClientError) as exc:
            return web.json_response(error_body(f"upstream /models failed: {exc!r}", "upstream_error"), status=502)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        found = self._lookup(request)
        if isinstance(found, web.Response):
            return found
        session = found
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response(error_body("request body is not JSON", "invalid_request_error"), status=400)
        turn = Turn(
            index=session.take_index(),
            session_id=session.id,
            request_messages=body.get("messages") or [],
            tools=body.get("tools") or None,
            mode=self.mode,
            weight_version=self.weight_version,
            started_at=time.time(),
            params={
                k: body.get(k)
                for k in ("temperature", "top_p", "max_tokens", "max_completion_tokens", "tool_choice", "stream")
                if k in body
            },
        )
        if session.seed is not None and body.get("seed") is None:
            body["seed"] = session.turn_seed(turn.index)
        turn.started_mono, t0 = time.monotonic(), time.perf_counter()
        try:
            if self._tokens is not None:
                return await self._tokens.chat(request, body, session, turn)
            return await chat_forward(self._server, request, body, turn)
        except UpstreamFailure as exc:
            turn.status, turn.error = exc.status, exc.message
            return web.json_response(exc.body, status=exc.status)
        except asyncio.CancelledError:  # the agent hung up; the turn must not look like a success without ids
            turn.status, turn.error = 499, "client disconnected"
            raise
        except Exception as exc:  # noqa: BLE001 - a bug here: the agent gets a 500, the rollout re-raises it
            turn.status, turn.error = 500, f"proxy error: {exc!r}"
            session.bug = exc
            log.exception("proxy bug in session %s", session.id)
            return web.json_response(error_body(f"proxy error: {exc!r}"), status=500)
        finally:
            turn.latency = time.perf_counter() - t0
            if self.next_weight_version not in (None, turn.weight_version):
                turn.weight_version_end = self.next_weight_version  # a sync began while the call was in flight
            session.turns.append(turn)


__all__ = ["RecordingProxy", "ProxyError", "Session", "Turn"]
