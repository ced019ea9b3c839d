"""A session's conversation as a person reads it, for the rollout dumps and the viewer: every message the agent
sent and received (tool outputs capped, with the cap recorded) and, per model call, what was sampled."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from qwen_swe.traffic.trajectory import Turn

OUTPUT_CAP = 4000  # characters kept of one message's content (tool outputs can be megabytes)


def transcript(turns: Iterable[Turn], cap: int = OUTPUT_CAP) -> dict[str, Any]:
    turns = sorted(turns, key=lambda t: t.index)
    last = turns[-1] if turns else None
    raw = list(last.request_messages) + ([last.message] if last and last.message else []) if last else []
    messages = [_capped(m, cap) for m in raw]
    return {
        "messages": messages,
        "output_cap": cap,
        "capped_messages": sum("truncated_chars" in m for m in messages),
        "calls": [
            {
                "index": t.index,
                "status": t.status,
                "error": t.error,
                "finish_reason": t.finish_reason,
                "sampled_tokens": len(t.sampled_ids or []),
                "seconds": round(t.latency, 3),
            }
            for t in turns
        ],
    }


def _capped(message: dict[str, Any], cap: int) -> dict[str, Any]:
    out = {k: v for k, v in message.items() if k in ("role", "content", "tool_calls", "tool_call_id", "name")}
    content = out.get("content")
    if content is not None and not isinstance(content, str):
        content = json.dumps(content)
    if content is not None and len(content) > cap:
        out["truncated_chars"] = len(content) - cap
        content = content[:cap]
    out["content"] = content
    return out
