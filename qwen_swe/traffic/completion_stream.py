"""``/v1/completions`` as server-sent events, both ways, in vLLM's shapes (vLLM 0.32 ``completion/serving.py``).

Token mode asks for its completion streamed. The connection then carries bytes from the first token on, so a
server behind Modal, which ends a web request after 150 s without an answer, can generate for as long as the
call needs. ``Assembler`` rebuilds the whole answer from the chunks, exactly as the server would have answered it
unstreamed: the text, the token ids, their logprobs, the finish and stop reasons, and from the final usage chunk
(``stream_options.include_usage``) the usage with its cached prompt tokens and vLLM's per-request ``metrics``.
``events`` (and ``respond``, which serves it) is the other side, for the upstreams this project serves itself (the
warm start's expert): a whole answer cut into vLLM's chunks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from aiohttp import web

STREAM_OPTIONS = {"include_usage": True}  # the final chunk then carries the usage and the server's figures
DONE = "[DONE]"


class Assembler:
    """Chunks in, the unstreamed answer out; ``error`` is the server's error event, when it sent one."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.ids: list[int] | None = []  # None once a chunk came without them (a server without return_token_ids)
        self.logprobs: list[float | None] | None = []
        self.prompt_ids: list[int] | None = None
        self.finish: str | None = None
        self.stop_reason: Any = None
        self.usage: dict[str, Any] | None = None
        self.metrics: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.done = False

    def add_line(self, line: str) -> None:
        """One line of the event stream; blank lines and comments carry nothing."""
        if not line.startswith("data:"):
            return
        data = line[len("data:") :].strip()
        if data == DONE:
            self.done = True
        elif data:
            self.add(json.loads(data))

    def add(self, chunk: dict[str, Any]) -> None:
        if "error" in chunk:
            self.error = chunk["error"] if isinstance(chunk["error"], dict) else {"message": str(chunk["error"])}
            return
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        if chunk.get("metrics") is not None:
            self.metrics = chunk["metrics"]
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            self.text.append(choice.get("text") or "")
            ids = choice.get("token_ids")
            if ids is None:
                self.ids = None
            elif self.ids is not None:
                self.ids.extend(ids)
            logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
            if logprobs is None:
                if ids:  # tokens without their logprobs: the answer has none
                    self.logprobs = None
            elif self.logprobs is not None:
                self.logprobs.extend(logprobs)
            if choice.get("prompt_token_ids") is not None:
                self.prompt_ids = choice["prompt_token_ids"]
            if choice.get("finish_reason") is not None:
                self.finish, self.stop_reason = choice["finish_reason"], choice.get("stop_reason")

    def answer(self) -> dict[str, Any]:
        """The answer as ``/v1/completions`` gives it unstreamed (the fields token mode reads)."""
        choice: dict[str, Any] = {
            "index": 0,
            "text": "".join(self.text),
            "token_ids": self.ids,
            "prompt_token_ids": self.prompt_ids,
            "logprobs": {"token_logprobs": self.logprobs} if self.logprobs is not None else None,
            "finish_reason": self.finish,
            "stop_reason": self.stop_reason,
        }
        out: dict[str, Any] = {"object": "text_completion", "choices": [choice]}
        if self.usage is not None:
            out["usage"] = self.usage
        if self.metrics is not None:
            out["metrics"] = self.metrics
        return out


def events(answer: dict[str, Any], *, parts: int = 3, include_usage: bool = False) -> Iterator[bytes]:
    """A whole ``/v1/completions`` answer (one choice) as vLLM streams it: its tokens in up to ``parts`` chunks of
    text, ids and logprobs (the prompt ids on the first), the finish reason on the last, then the usage chunk (with
    the answer's ``metrics``) when asked for, then ``[DONE]``."""
    choice = answer["choices"][0]
    ids, lp, text = choice.get("token_ids"), choice.get("logprobs"), choice.get("text") or ""
    n = len(ids) if ids is not None else len((lp or {}).get("token_logprobs") or [])
    cuts = sorted({0, n, *(n * k // parts for k in range(1, parts))})
    spans = list(zip(cuts, cuts[1:])) or [(0, 0)]
    head: dict[str, Any] = {k: answer[k] for k in ("id", "created", "model") if k in answer}
    for k, (lo, hi) in enumerate(spans):
        last = k == len(spans) - 1
        delta: dict[str, Any] = {
            "index": 0,
            "text": text[len(text) * lo // n : len(text) * hi // n] if n else text,
            "token_ids": ids[lo:hi] if ids is not None else None,
            "logprobs": {key: (lp.get(key) or [])[lo:hi] for key in ("tokens", "token_logprobs", "top_logprobs")}
            if lp is not None
            else None,
            "finish_reason": choice.get("finish_reason") if last else None,
            "stop_reason": choice.get("stop_reason") if last else None,
        }
        if k == 0 and choice.get("prompt_token_ids") is not None:
            delta["prompt_token_ids"] = choice["prompt_token_ids"]
        yield _event({**head, "object": "text_completion", "choices": [delta]})
    if include_usage and answer.get("usage") is not None:  # vLLM's per-request metrics ride on this chunk too
        figures = {k: answer[k] for k in ("usage", "metrics") if answer.get(k) is not None}
        yield _event({**head, "object": "text_completion", "choices": [], **figures})
    yield f"data: {DONE}\n\n".encode()


async def respond(request: web.Request, body: dict[str, Any], answer: dict[str, Any]) -> web.StreamResponse:
    """``answer`` as ``body`` asked for it: whole, or streamed as vLLM streams it."""
    if not body.get("stream"):
        return web.json_response(answer)
    out = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await out.prepare(request)
    for event in events(answer, include_usage=bool((body.get("stream_options") or {}).get("include_usage"))):
        await out.write(event)
    await out.write_eof()
    return out


def _event(chunk: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(chunk)}\n\n".encode()
