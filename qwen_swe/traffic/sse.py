"""The proxy's answer to a streamed request: the reply it already has, replayed as server-sent events."""

from __future__ import annotations

import json
import time
from typing import Any


def sse_chunks(
    reply_id: str, model: str, message: dict[str, Any], finish: str, usage: dict[str, Any] | None
) -> list[bytes]:
    """A finished reply as the server-sent events of a streamed chat completion (qwen-code streams), in the order
    OpenAI sends them: role, reasoning, content, each tool call, the finish reason, the usage, ``[DONE]``."""
    created = int(time.time())

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        obj = {
            "id": reply_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": choices,
            **extra,
        }
        return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"

    def delta(d: dict[str, Any], finish_reason: str | None = None) -> bytes:
        return chunk([{"index": 0, "delta": d, "logprobs": None, "finish_reason": finish_reason}])

    out = [delta({"role": "assistant", "content": ""})]
    if message.get("reasoning_content"):
        out.append(delta({"reasoning_content": message["reasoning_content"]}))
    if message.get("content"):
        out.append(delta({"content": message["content"]}))
    for i, call in enumerate(message.get("tool_calls") or ()):
        out.append(
            delta(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": call["function"]["arguments"]},
                        }
                    ]
                }
            )
        )
    out.append(delta({}, finish))
    if usage is not None:
        out.append(chunk([], usage=usage))
    out.append(b"data: [DONE]\n\n")
    return out
