"""A session's conversation as a person reads it, for the rollout dumps and the viewer: every message the agent
sent and received (tool outputs capped, with the cap recorded) and, per model call, what was sampled; and the
session's model calls as timeline spans (``call_spans``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from qwen_swe.rollout.timeline import AGENT, MODEL, TOOL
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


def call_spans(turns: Iterable[Turn]) -> list[tuple[str, float, float, dict[str, Any]]]:
    """``(kind, start, end, attrs)`` on ``time.monotonic()``: each model call as the proxy served it (its tokens, how
    many of its prompt's leading ids repeat the previous call's prompt and sampled ids, the server's share of its
    time, and what the server reports: prefix-cached tokens, queue / prefill / decode), and
    each gap between one call's answer and the next call. The proxy sees only the calls, so a gap is inferred: after
    a reply with tool calls it is the agent running them (``tool``, with their names), else the agent's own work."""
    calls = sorted((t for t in turns if t.started_mono), key=lambda t: t.started_mono)
    out: list[tuple[str, float, float, dict[str, Any]]] = []
    held: list[int] = []  # the previous call's prompt and sampled ids: what the server may still hold in its cache
    for i, t in enumerate(calls):
        end = t.started_mono + t.latency
        attrs: dict[str, Any] = {
            "turn": t.index,
            "status": t.status,
            "prompt_tokens": len(t.prompt_ids) if t.prompt_ids is not None else (t.usage or {}).get("prompt_tokens"),
            "generated_tokens": len(t.sampled_ids or ()),
            "server_seconds": round(t.upstream_latency, 4),
        }
        if t.prompt_ids is not None:  # an upper bound of the prefix cache's hits, whatever the server reports
            attrs["reused_prefix_tokens"] = _common_prefix(held, t.prompt_ids)
            held = list(t.prompt_ids) + list(t.sampled_ids or ())
        if t.cached_tokens is not None:
            attrs["cached_tokens"] = t.cached_tokens
        attrs.update(t.server_timing or {})
        out.append((MODEL, t.started_mono, end, attrs))
        if i + 1 < len(calls):
            names = [(c.get("function") or {}).get("name") for c in (t.message or {}).get("tool_calls") or ()]
            gap = (TOOL, {"tools": names}) if names else (AGENT, {})
            out.append((gap[0], end, max(end, calls[i + 1].started_mono), gap[1]))
    return out


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)
