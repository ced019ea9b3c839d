"""Token mode of the recording proxy: the session's token history is the proxy's. Each chat request becomes the
prompt ids the model was conditioned on (``sessions.PromptBuilder``: earlier prompts and sampled ids kept, newly
rendered messages appended), a ``/v1/completions`` call with those ids (streamed, and rebuilt whole:
``completion_stream``), the sampled text parsed into tool calls
(``toolcalls``), and an answer in the chat API's shape, streamed or not. The training sequence is then exactly what
the model saw and produced.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from qwen_swe.errors import UpstreamFailure
from qwen_swe.traffic.completion_stream import STREAM_OPTIONS
from qwen_swe.traffic.sessions import PromptBuilder, PromptPlan, Session
from qwen_swe.traffic.sse import sse_chunks
from qwen_swe.traffic.toolcalls import ParsedReply, parse_completion, split_reasoning, structural_tag
from qwen_swe.traffic.trajectory import Turn
from qwen_swe.traffic.upstream import Upstream, error_body, served_figures

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

Offload = Callable[..., Awaitable[Any]]  # runs a blocking call on the proxy's own threads


class TokenMode:
    """Serves one chat request of a session in token mode (``chat``), recording it on its ``Turn``."""

    def __init__(self, builder: PromptBuilder, upstream: Upstream, tool_parser: str, offload: Offload) -> None:
        self.builder, self.upstream, self.tool_parser, self._offload = builder, upstream, tool_parser, offload

    async def chat(
        self, request: web.Request, body: dict[str, Any], session: Session, turn: Turn
    ) -> web.StreamResponse:
        """Plan the prompt ids -> complete with ids -> parse the reply -> answer as a chat completion."""
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
        return await _answer(request, body, turn, message, finish, self.upstream.model)

    async def _plan(self, request: web.Request, body: dict[str, Any], session: Session, turn: Turn) -> PromptPlan:
        """The prompt ids: earlier prompts and sampled ids kept, newly rendered messages appended."""
        args = (
            turn.request_messages,
            turn.tools,
            list(session.turns),
            body.get("chat_template_kwargs"),
            session.last_render,
        )
        small = (request.content_length or 0) < INLINE_RENDER_BYTES
        plan = self.builder.plan(*args) if small else await self._offload(self.builder.plan, *args)
        turn.prompt_ids, turn.prompt_source, turn.drift = plan.prompt_ids, plan.source, plan.drift
        return plan

    async def _max_tokens(self, body: dict[str, Any], prompt_len: int) -> int | None:
        """The agent's limit, bounded by what fits the context (the completions API defaults to 16 tokens)."""
        wanted = body.get("max_completion_tokens") or body.get("max_tokens")
        context = await self.upstream.max_model_len()
        room = context - prompt_len if context else None
        if room is not None and room <= 0:
            raise UpstreamFailure(
                400,
                error_body(
                    f"the prompt has {prompt_len} tokens, the server's context is {context}",
                    "invalid_request_error",
                    400,
                ),
                "context length exceeded",
            )
        if wanted is None:
            return room
        return min(int(wanted), room) if room is not None else int(wanted)

    async def _complete(self, body: dict[str, Any], turn: Turn, prompt_ids: list[int]) -> dict[str, Any]:
        """``/v1/completions`` with token ids (a forced tool call constrained by a structural tag)."""
        payload: dict[str, Any] = {
            "model": self.upstream.model or body.get("model"),
            "prompt": prompt_ids,
            "max_tokens": await self._max_tokens(body, len(prompt_ids)),
            "return_token_ids": True,
            "logprobs": 1,
            "skip_special_tokens": False,
            "stream": True,  # bytes flow from the first token on, so no proxy in between (Modal's, 150 s) ends it
            "stream_options": STREAM_OPTIONS,
        }
        payload.update({k: body[k] for k in SAMPLING_KEYS if body.get(k) is not None})
        forced = forced_tools(turn.tools, body.get("tool_choice"))
        if forced:
            payload["structured_outputs"] = {"structural_tag": json.dumps(structural_tag(forced, self.tool_parser))}
        t0 = time.perf_counter()
        try:
            resp = await self.upstream.post_upstream("/completions", payload)
        except UpstreamFailure as exc:
            if not (forced and exc.status == 400):
                raise
            # the grammar backend rejected a tool schema: keep the call envelope, free the arguments
            payload["structured_outputs"] = {
                "structural_tag": json.dumps(structural_tag(forced, self.tool_parser, strict_arguments=False))
            }
            resp = await self.upstream.post_upstream("/completions", payload)
        data = await self.upstream.read_stream(resp, "/completions")
        turn.upstream_latency = time.perf_counter() - t0
        turn.cached_tokens, turn.server_timing = served_figures(data)
        choice = (data.get("choices") or [{}])[0]
        ids = choice.get("token_ids")
        if ids is None:
            raise UpstreamFailure(
                502,
                error_body(
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
        assert turn.sampled_ids is not None  # _complete recorded them
        text = self.builder.decode(turn.sampled_ids)
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
    request: web.Request, body: dict[str, Any], turn: Turn, message: dict[str, Any], finish: str, served: str | None
) -> web.StreamResponse:
    reply_id = f"chatcmpl-{uuid.uuid4().hex}"
    model = body.get("model") or served or ""
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


def forced_tools(tools: list[dict] | None, tool_choice: Any) -> list[dict] | None:
    """The tools a ``tool_choice`` obliges the model to call (``required``: any of them; a named one: that one)."""
    if not tools:
        return None
    if tool_choice == "required":
        return tools
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        chosen = [t for t in tools if t.get("function", t).get("name") == name]
        return chosen or None
    return None
