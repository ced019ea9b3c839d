"""The inference server's own counters around a step's rollouts: vLLM's Prometheus ``/metrics``, read before and after
the batch, give the step's prefix-cache hit rate and the time its requests spent queued, in prefill and in decode, as
the server measured them. Unlike the per-call figures on a timeline's model spans, they need no server flag; they
count every request the server served meanwhile (another client's too), so they are the server's view of the step.
"""

from __future__ import annotations

from typing import Any

from qwen_swe.errors import InferenceError

# vLLM's counter (or histogram sum/count) -> our name
COUNTERS = {
    "vllm:prefix_cache_queries_total": "prefix_cache_queries",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits",
    "vllm:request_queue_time_seconds_sum": "queue_seconds",
    "vllm:request_prefill_time_seconds_sum": "prefill_seconds",
    "vllm:request_decode_time_seconds_sum": "decode_seconds",
    "vllm:request_queue_time_seconds_count": "requests",
}


def read_counters(text: str) -> dict[str, float]:
    """The counters of ``COUNTERS`` in a Prometheus text page, each summed over its label sets (engines, models)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition("{") if "{" in line.split(" ", 1)[0] else line.partition(" ")
        ours = COUNTERS.get(name.strip())
        if ours is None:
            continue
        try:
            value = float(rest.rsplit("}", 1)[-1].split()[0])
        except (IndexError, ValueError):
            continue
        out[ours] = out.get(ours, 0.0) + value
    return out


def step_figures(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float]:
    """``server/...`` metrics of what the server counted between two reads (none when either read failed)."""
    if not before or not after:
        return {}
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    out = {f"server/{k}": v for k, v in delta.items() if k not in ("prefix_cache_queries", "prefix_cache_hits")}
    if delta.get("prefix_cache_queries", 0.0) > 0:
        out["server/prefix_cache_hit_rate"] = delta.get("prefix_cache_hits", 0.0) / delta["prefix_cache_queries"]
    return out


def snapshot(client: Any) -> dict[str, float] | None:
    """The server's counters now (``client``: an ``InferenceClient``); ``None`` where it has no ``/metrics`` page
    (not vLLM, or one that does not log stats): the step then has no ``server/`` figures, never a failure."""
    try:
        page = client.get("/metrics")
    except InferenceError:
        return None
    return read_counters(page) if isinstance(page, str) else None
