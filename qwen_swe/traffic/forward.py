"""Forward mode of the recording proxy: the agent's chat request goes upstream with ``return_token_ids`` and
``logprobs`` added, the answer goes back unchanged (streamed or not), and the turn is recorded from it.

It works in front of any vLLM as it is, but the agent's resent history re-tokenises differently from what the
model sampled, so trajectories drift; the run uses token mode (``proxy.py``). This is the path for servers that
give no token ids, with the chat-template mask fallback in ``trajectory.py``.
"""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

import aiohttp
from aiohttp import web

from qwen_swe.traffic.toolcalls import new_call_id
from qwen_swe.traffic.trajectory import Turn
from qwen_swe.traffic.upstream import served_figures, sse_lines


class Upstream(Protocol):
    """What forward mode needs of the proxy: the served model name and its upstream calls."""

    model: str | None

    async def post_upstream(self, path: str, payload: dict[str, Any]) -> aiohttp.ClientResponse: ...
    async def read_json(self, resp: aiohttp.ClientResponse, path: str) -> dict[str, Any]: ...


async def chat_forward(proxy: Upstream, request: web.Request, body: dict[str, Any], turn: Turn) -> web.StreamResponse:
    payload = dict(body, return_token_ids=True, logprobs=True)
    payload.pop("top_logprobs", None)
    if proxy.model:
        payload["model"] = proxy.model
    t0 = time.perf_counter()
    resp = await proxy.post_upstream("/chat/completions", payload)
    if not body.get("stream"):
        data = await proxy.read_json(resp, "/chat/completions")
        turn.upstream_latency = time.perf_counter() - t0
        _record_chat(turn, data)
        return web.json_response(data)
    out = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await out.prepare(request)
    acc = _StreamAccumulator()
    try:
        async for line in sse_lines(resp):
            await out.write(line)
            acc.feed(line)
    except TimeoutError:
        turn.status, turn.error = 504, "timeout while streaming"
    finally:
        resp.release()
        turn.upstream_latency = time.perf_counter() - t0
    acc.apply(turn)
    await out.write_eof()
    return out


def _record_chat(turn: Turn, data: dict[str, Any]) -> None:
    choice = (data.get("choices") or [{}])[0]
    msg = dict(choice.get("message") or {})
    if "reasoning" in msg and "reasoning_content" not in msg:
        msg["reasoning_content"] = msg.pop("reasoning")
    turn.message = {k: v for k, v in msg.items() if v is not None or k == "content"}
    turn.finish_reason = choice.get("finish_reason")
    turn.usage = data.get("usage")
    turn.cached_tokens, turn.server_timing = served_figures(data)
    turn.prompt_ids = data.get("prompt_token_ids")
    turn.sampled_ids = choice.get("token_ids")
    content = (choice.get("logprobs") or {}).get("content")
    turn.logprobs = [float(e.get("logprob", 0.0)) for e in content] if content is not None else None


class _StreamAccumulator:
    """Rebuilds the assistant message, ids and logprobs from a chat-completion SSE stream."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.prompt_ids: list[int] | None = None
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.has_ids = self.has_logprobs = False
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None

    def feed(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        raw = line[5:].strip()
        if not raw or raw == b"[DONE]":
            return
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            return
        if data.get("prompt_token_ids") is not None:
            self.prompt_ids = data["prompt_token_ids"]
        if data.get("usage"):
            self.usage = data["usage"]
        for choice in data.get("choices") or ():
            if choice.get("token_ids") is not None:
                self.has_ids = True
                self.ids.extend(choice["token_ids"])
            content = (choice.get("logprobs") or {}).get("content")
            if content is not None:
                self.has_logprobs = True
                self.logprobs.extend(float(e.get("logprob", 0.0)) for e in content)
            d = choice.get("delta") or {}
            if d.get("content"):
                self.content.append(d["content"])
            r = d.get("reasoning_content") or d.get("reasoning")
            if r:
                self.reasoning.append(r)
            for tc in d.get("tool_calls") or ():
                slot = self.calls.setdefault(
                    tc.get("index", 0), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                )
                slot["id"] = tc.get("id") or slot["id"]
                fn = tc.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]

    def apply(self, turn: Turn) -> None:
        msg: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.calls:
            msg["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
            for call in msg["tool_calls"]:
                call["id"] = call["id"] or new_call_id()
        if self.reasoning:
            msg["reasoning_content"] = "".join(self.reasoning)
        turn.message, turn.finish_reason, turn.usage = msg, self.finish, self.usage
        turn.cached_tokens, turn.server_timing = served_figures({"usage": self.usage})
        turn.prompt_ids = self.prompt_ids
        turn.sampled_ids = self.ids if self.has_ids else None
        turn.logprobs = self.logprobs if self.has_logprobs else None
