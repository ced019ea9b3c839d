"""The recording OpenAI-compatible proxy between the agent and the inference server.

One session per rollout; its id is in the base URL the agent gets (``{root}/s/{id}/v1``), because the
agent only lets us set a base URL. Two modes:

* ``tokens`` (default when a tokenizer is given): the proxy owns the session's token history. It renders
  each prompt with the served chat template, splices in the ids the model sampled on earlier turns
  (``sessions.PromptBuilder``), calls the server's ``/v1/completions`` with token ids, parses tool calls
  from the completion (``toolcalls``) and answers as a chat completion. The training sequence is then
  exactly what the model was conditioned on and produced.
* ``forward``: the chat request goes upstream with ``return_token_ids`` and ``logprobs`` added, the answer
  streams back unchanged, and the turn is recorded from it. Works in front of any vLLM as-is, but the
  agent's resent history re-tokenises differently, so trajectories drift.

Every call becomes a ``Turn`` (errors too: upstream statuses >= 400 are passed on, timeouts become 504).
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
from qwen_swe.traffic.sse import sse_chunks
from qwen_swe.traffic.toolcalls import FORMATS, ParsedReply, parse_completion, split_reasoning, structural_tag
from qwen_swe.traffic.trajectory import Turn

log = logging.getLogger("qwen_swe.proxy")
SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
)


# Below this request size, rendering + tokenising (~0.5 ms) is cheaper on the event loop than a thread hop;
# above it, it moves off the loop so that one long session cannot stall the others.
INLINE_RENDER_BYTES = 32_768


def _error_body(message: str, kind: str = "proxy_error", code: int | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code}}


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
        self._tokenizer_path, self._tokenizer, self._chat_template = tokenizer_path, tokenizer, chat_template
        self._host, self._port, self._api_key = host, port, api_key  # the server's key, sent upstream
        self._builder: PromptBuilder | None = None
        self._max_model_len: int | None = None  # from the server's /models card, to bound max_tokens
        # Rendering and tokenising run on the proxy's own threads: the default executor is shared with callers
        # that park blocking calls there for a whole agent run (docker exec), which would starve the proxy.
        self._executor: ThreadPoolExecutor | None = None
        self._sessions: dict[str, Session] = {}
        self._closed: set[str] = set()
        self._endpoints: dict[str, SessionEndpoint] = {}  # session id -> its socket, where it has one
        self._runner: web.AppRunner | None = None
        self._client: aiohttp.ClientSession | None = None
        self.root: str | None = None

    # --- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> str:
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="proxy-render")
        self._card_lock = asyncio.Lock()
        if self.mode == "tokens":
            tokenizer = self._tokenizer
            if tokenizer is None:
                from transformers import AutoTokenizer

                tokenizer = await self._offload(AutoTokenizer.from_pretrained, self._tokenizer_path)
            self._builder = PromptBuilder(tokenizer, self._chat_template)
        auth = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else None
        self._client = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=512, force_close=False),
            timeout=aiohttp.ClientTimeout(total=self.request_timeout),
            headers=auth,
        )
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
            if self._client is not None:
                await self._client.close()
                self._client = None
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
        return self._builder.tokenizer if self._builder else None

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
            _error_body(
                f"session {sid} is {'closed' if status == 410 else 'unknown'}", "invalid_request_error", status
            ),
            status=status,
        )

    async def _models(self, request: web.Request) -> web.Response:
        found = self._lookup(request)
        if isinstance(found, web.Response):
            return found
        assert self._client is not None, "start() first"
        try:
            async with self._client.get(f"{self.upstream}/models") as resp:
                return web.Response(status=resp.status, body=await resp.read(), content_type="application/json")
        except (TimeoutError, aiohttp.ClientError) as exc:
            return web.json_response(_error_body(f"upstream /models failed: {exc!r}", "upstream_error"), status=502)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        found = self._lookup(request)
        if isinstance(found, web.Response):
            return found
        session = found
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response(_error_body("request body is not JSON", "invalid_request_error"), status=400)
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
        t0 = time.perf_counter()
        try:
            if self.mode == "tokens":
                return await self._chat_tokens(request, body, session, turn)
            return await chat_forward(self, request, body, turn)
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
            return web.json_response(_error_body(f"proxy error: {exc!r}"), status=500)
        finally:
            turn.latency = time.perf_counter() - t0
            session.turns.append(turn)

    # --- upstream calls --------------------------------------------------------------------------
    async def post_upstream(self, path: str, payload: dict[str, Any]) -> aiohttp.ClientResponse:
        assert self._client is not None, "start() first"
        try:
            resp = await self._client.post(f"{self.upstream}{path}", json=payload)
        except TimeoutError:
            raise UpstreamFailure(
                504, _error_body(f"upstream {path} timed out after {self.request_timeout}s", "timeout", 504), "timeout"
            ) from None
        except aiohttp.ClientError as exc:
            raise UpstreamFailure(
                502,
                _error_body(f"upstream {path} unreachable: {exc!r}", "upstream_error", 502),
                f"unreachable: {exc!r}",
            ) from None
        if resp.status >= 400:
            raw = await resp.read()
            resp.release()
            try:
                err = json.loads(raw)
            except json.JSONDecodeError:
                err = _error_body(raw.decode(errors="replace")[:2000], "upstream_error", resp.status)
            raise UpstreamFailure(resp.status, err, f"upstream {resp.status}: {raw[:500].decode(errors='replace')}")
        return resp

    async def read_json(self, resp: aiohttp.ClientResponse, path: str) -> dict[str, Any]:
        try:
            return await resp.json(content_type=None)
        except TimeoutError:
            raise UpstreamFailure(
                504, _error_body(f"upstream {path} timed out after {self.request_timeout}s", "timeout", 504), "timeout"
            ) from None
        finally:
            resp.release()

    # --- token mode ------------------------------------------------------------------------------
    async def _fetch_max_model_len(self) -> None:
        if self._max_model_len is not None:
            return
        assert self._client is not None, "start() first"
        try:
            async with self._client.get(f"{self.upstream}/models") as resp:
                cards = (await resp.json(content_type=None)).get("data") or []
            self._max_model_len = next((int(c["max_model_len"]) for c in cards if c.get("max_model_len")), 0)
        except (TimeoutError, aiohttp.ClientError, ValueError, AttributeError):
            self._max_model_len = 0

    async def _max_tokens(self, body: dict[str, Any], prompt_len: int) -> int | None:
        """The agent's limit, bounded by what fits the context (the completions API defaults to 16 tokens)."""
        wanted = body.get("max_completion_tokens") or body.get("max_tokens")
        if self._max_model_len is None:
            async with self._card_lock:  # one /models call for all sessions, not one per concurrent first request
                await self._fetch_max_model_len()
        room = self._max_model_len - prompt_len if self._max_model_len else None
        if room is not None and room <= 0:
            raise UpstreamFailure(
                400,
                _error_body(
                    f"the prompt has {prompt_len} tokens, the server's context is {self._max_model_len}",
                    "invalid_request_error",
                    400,
                ),
                "context length exceeded",
            )
        if wanted is None:
            return room
        return min(int(wanted), room) if room is not None else int(wanted)

    async def _chat_tokens(
        self, request: web.Request, body: dict[str, Any], session: Session, turn: Turn
    ) -> web.StreamResponse:
        """Token mode: plan the prompt ids -> complete with ids -> parse the reply -> answer as a chat completion."""
        plan = await self._plan(request, body, session, turn)
        choice = await self._complete(body, turn, plan.prompt_ids)
        session.last_render = (turn.index, plan.text)
        message, finish = self._parse(body, turn, choice)
        assert turn.sampled_ids is not None  # _complete recorded them
        turn.usage = {
            "prompt_tokens": len(plan.prompt_ids),
            "completion_tokens": len(turn.sampled_ids),
            "total_tokens": len(plan.prompt_ids) + len(turn.sampled_ids),
        }
        return await self._answer(request, body, turn, message, finish)

    async def _plan(self, request: web.Request, body: dict[str, Any], session: Session, turn: Turn) -> Any:
        """The prompt ids: earlier prompts and sampled ids kept, newly rendered messages appended."""
        builder = self._builder
        assert builder is not None  # token mode has one
        args = (
            turn.request_messages,
            turn.tools,
            list(session.turns),
            body.get("chat_template_kwargs"),
            session.last_render,
        )
        small = (request.content_length or 0) < INLINE_RENDER_BYTES
        plan = builder.plan(*args) if small else await self._offload(builder.plan, *args)
        turn.prompt_ids, turn.prompt_source, turn.drift = plan.prompt_ids, plan.source, plan.drift
        return plan

    async def _complete(self, body: dict[str, Any], turn: Turn, prompt_ids: list[int]) -> dict[str, Any]:
        """``/v1/completions`` with token ids (a forced tool call constrained by a structural tag)."""
        payload: dict[str, Any] = {
            "model": self.model or body.get("model"),
            "prompt": prompt_ids,
            "max_tokens": await self._max_tokens(body, len(prompt_ids)),
            "return_token_ids": True,
            "logprobs": 1,
            "skip_special_tokens": False,
        }
        payload.update({k: body[k] for k in SAMPLING_KEYS if body.get(k) is not None})
        forced = _forced_tools(turn.tools, body.get("tool_choice"))
        if forced:
            payload["structured_outputs"] = {"structural_tag": json.dumps(structural_tag(forced, self.tool_parser))}
        t0 = time.perf_counter()
        try:
            resp = await self.post_upstream("/completions", payload)
        except UpstreamFailure as exc:
            if not (forced and exc.status == 400):
                raise
            # the grammar backend rejected a tool schema: keep the call envelope, free the arguments
            payload["structured_outputs"] = {
                "structural_tag": json.dumps(structural_tag(forced, self.tool_parser, strict_arguments=False))
            }
            resp = await self.post_upstream("/completions", payload)
        data = await self.read_json(resp, "/completions")
        turn.upstream_latency = time.perf_counter() - t0
        choice = (data.get("choices") or [{}])[0]
        ids = choice.get("token_ids")
        if ids is None:
            raise UpstreamFailure(
                502,
                _error_body(
                    "upstream /completions returned no token_ids; the server must be vLLM >= 0.10.2",
                    "upstream_error",
                    502,
                ),
                "no token ids",
            )
        turn.sampled_ids = list(ids)
        lps = (choice.get("logprobs") or {}).get("token_logprobs")
        turn.logprobs = [float(x) if x is not None else 0.0 for x in lps] if lps is not None else None
        return choice

    def _parse(self, body: dict[str, Any], turn: Turn, choice: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The sampled text as an assistant message: tool calls in the template's format, reasoning split off."""
        assert self._builder is not None and turn.sampled_ids is not None  # token mode; _complete recorded them
        text = self._builder.decode(turn.sampled_ids)
        turn.completion_text = text
        if turn.tools and body.get("tool_choice") != "none":
            parsed = parse_completion(text, self.tool_parser, turn.tools)
        else:
            reasoning, rest = split_reasoning(text)
            parsed = ParsedReply(content=rest or None, reasoning_content=reasoning)
        message = parsed.message()
        turn.parse_errors = parsed.errors
        finish = "tool_calls" if message.get("tool_calls") else (choice.get("finish_reason") or "stop")
        turn.message, turn.finish_reason = message, finish
        return message, finish

    async def _answer(
        self, request: web.Request, body: dict[str, Any], turn: Turn, message: dict[str, Any], finish: str
    ) -> web.StreamResponse:
        reply_id = f"chatcmpl-{uuid.uuid4().hex}"
        model = body.get("model") or self.model or ""
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": reply_id,
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "usage": turn.usage,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                }
            )
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await out.prepare(request)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        await out.write(b"".join(sse_chunks(reply_id, model, message, finish, turn.usage if include_usage else None)))
        await out.write_eof()
        return out


def _forced_tools(tools: list[dict] | None, tool_choice: Any) -> list[dict] | None:
    if not tools:
        return None
    if tool_choice == "required":
        return tools
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        chosen = [t for t in tools if t.get("function", t).get("name") == name]
        return chosen or None
    return None


__all__ = ["RecordingProxy", "ProxyError", "Session", "Turn"]
