"""Where a rollout's time goes: its spans, and a step's summary of them.

A span is ``(kind, start, end, attrs)``. A rollout measures its spans on the monotonic clock and records them as
seconds from its own start, with the wall-clock time of that start (``origin``), so that rollouts of one step (and
the trainer's phases, ``PhaseTimer``) line up on one axis, also when they ran on other machines. The record that
goes into the sample (``RunRecord.timeline``) and ``rollouts/step_N.jsonl`` is::

    {"origin": <unix seconds>, "seconds": <the rollout's wall time>,
     "spans": [{"kind": "boot", "start": 0.0, "end": 1.82, "attrs": {}}, ...]}

A step's summary (``summarize``), in ``metrics.jsonl`` and TensorBoard as ``timeline/...``:

* ``model_busy``: the share of the rollout phase (first rollout's start to last rollout's end) during which at least
  one model call was in flight;
* ``share/<kind>``: the share of the rollouts' summed time spent in each kind of span (``share/model`` is the model's
  own; ``share/other``, time under no span); the shares sum to 1;
* ``cache_hit_rate``: prompt tokens the server found in its prefix cache over all prompt tokens, of the calls whose
  server reports it;
* ``tail``: the slowest rollout's time over the median rollout's (1 when all take as long).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

MODEL = "model"  # one model call, as the proxy served it
# The rest are overheads, in the order a rollout meets them.
BOOT = "boot"  # the rollout machine started (and the session's model socket)
AGENT_SETUP = "agent_setup"  # the agent's settings and prompt written into the machine
AGENT_START = "agent_start"  # the agent's process started, until its first model call
TOOL = "tool"  # between a reply with tool calls and the next model call: the agent ran them (inferred)
AGENT = "agent"  # between a reply with no tool call and the next model call: the agent's own work (inferred)
AGENT_EXIT = "agent_exit"  # the last model call's end to the agent's process end
AGENT_CLEANUP = "agent_cleanup"  # its stray processes killed, its logs read
DIFF = "diff"  # the change taken as a diff
TEARDOWN = "teardown"  # the machine removed
GRADE = "grade"  # graded in a fresh machine
OTHER = "other"  # a rollout's time under no span
KINDS = (BOOT, AGENT_SETUP, AGENT_START, MODEL, TOOL, AGENT, AGENT_EXIT, AGENT_CLEANUP, DIFF, TEARDOWN, GRADE)


@dataclass(frozen=True)
class Span:
    kind: str
    start: float
    end: float
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "start": round(self.start, 4), "end": round(self.end, 4), "attrs": self.attrs}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Span:
        return cls(str(data["kind"]), float(data["start"]), float(data["end"]), dict(data.get("attrs") or {}))


class Clock:
    """One rollout's spans: given or timed on ``time.monotonic()``, kept as seconds from when the clock was made."""

    def __init__(self) -> None:
        self.origin_mono, self.origin_wall = time.monotonic(), time.time()
        self.spans: list[Span] = []

    def add(self, kind: str, start: float, end: float, attrs: dict[str, Any] | None = None) -> None:
        """A span from monotonic ``start`` to ``end`` (an end before the start is taken as the start)."""
        self.spans.append(Span(kind, start - self.origin_mono, max(start, end) - self.origin_mono, dict(attrs or {})))

    @contextmanager
    def span(self, kind: str) -> Iterator[dict[str, Any]]:
        """Time the block as a ``kind`` span, also when it raises; the block may fill the yielded attrs."""
        start, attrs = time.monotonic(), dict[str, Any]()
        try:
            yield attrs
        finally:
            self.add(kind, start, time.monotonic(), attrs)

    def record(self) -> dict[str, Any]:
        """The rollout's timeline as it goes into its record, ending now."""
        spans = sorted(self.spans, key=lambda s: (s.start, s.end))
        return {
            "origin": self.origin_wall,
            "seconds": round(time.monotonic() - self.origin_mono, 4),
            "spans": [s.to_dict() for s in spans],
        }


# --- a step's summary -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepTimeline:
    """A step's figures from its rollouts' timelines (see the module's docstring)."""

    rollouts: int
    model_busy: float
    model_seconds: float  # the union of model calls over the rollout phase
    phase_seconds: float  # the rollout phase: first rollout's start to last rollout's end
    shares: dict[str, float]
    cache_hit_rate: float | None
    tail: float | None

    def metrics(self) -> dict[str, float]:
        out = {
            "timeline/rollouts": float(self.rollouts),
            "timeline/model_busy": self.model_busy,
            "timeline/model_seconds": self.model_seconds,
            "timeline/phase_seconds": self.phase_seconds,
            **{f"timeline/share/{k}": v for k, v in self.shares.items()},
        }
        if self.cache_hit_rate is not None:
            out["timeline/cache_hit_rate"] = self.cache_hit_rate
        if self.tail is not None:
            out["timeline/tail"] = self.tail
        return out


def union_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def summarize(timelines: Iterable[dict[str, Any] | None]) -> StepTimeline | None:
    """The step's figures from its rollouts' timeline records (``None`` for a rollout that has none: an old record,
    or a backend that does not record them); ``None`` when no rollout has one."""
    records = [t for t in timelines if t and t.get("seconds") is not None]
    if not records:
        return None
    begin = min(float(t["origin"]) for t in records)
    end = max(float(t["origin"]) + float(t["seconds"]) for t in records)
    total = sum(float(t["seconds"]) for t in records)
    by_kind: dict[str, float] = {}
    model: list[tuple[float, float]] = []
    prompt = cached = 0
    for t in records:
        for span in (Span.from_dict(s) for s in t["spans"]):
            by_kind[span.kind] = by_kind.get(span.kind, 0.0) + span.seconds
            if span.kind == MODEL:
                model.append((t["origin"] + span.start, t["origin"] + span.end))
                if span.attrs.get("cached_tokens") is not None:
                    prompt += int(span.attrs.get("prompt_tokens") or 0)
                    cached += int(span.attrs["cached_tokens"])
    shares = {k: v / total for k, v in by_kind.items()} if total > 0 else dict.fromkeys(by_kind, 0.0)
    shares[OTHER] = max(0.0, 1.0 - sum(shares.values())) if total > 0 else 0.0
    busy = union_seconds(model)
    times = [float(t["seconds"]) for t in records]
    median = statistics.median(times)
    return StepTimeline(
        rollouts=len(records),
        model_busy=busy / (end - begin) if end > begin else 0.0,
        model_seconds=busy,
        phase_seconds=end - begin,
        shares=shares,
        cache_hit_rate=cached / prompt if prompt else None,
        tail=max(times) / median if median > 0 else None,
    )
