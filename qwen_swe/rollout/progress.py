"""A rollout batch's live counters (groups, samples running / graded / dropped, the reward so far), shown as the
shared progress display (``qwen_swe.progress``): a bar on a terminal, timed lines elsewhere."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from qwen_swe.data.sample import Sample, Status, run_of
from qwen_swe.progress import INTERVAL, show


@dataclass
class BatchStats:
    """Live counters for the progress display and the step's metrics. ``planned``: attempts started or about to
    be (a batch's samples, then each refill of a dropped one), the display's total."""

    groups: int = 0
    planned: int = 0
    running: int = 0
    graded: int = 0
    dropped: int = 0
    rewards: list[float] = field(default_factory=list)
    resolved: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def count(self, sample: Sample) -> None:
        """Count a finished sample: graded (its reward), or dropped (its ``DropReason`` value)."""
        if sample.status == Status.PENDING:  # did not finish: a bug is propagating
            return
        if sample.status == Status.ABORTED:
            self.dropped += 1
            key = run_of(sample).drop_reason or "unknown"
            self.reasons[key] = self.reasons.get(key, 0) + 1
        else:
            self.graded += 1
            self.rewards.append(float(sample.reward))
            self.resolved += bool(run_of(sample).resolved)

    @property
    def done(self) -> int:
        return self.graded + self.dropped

    @property
    def total(self) -> int:
        return max(self.planned, self.done)

    def detail(self) -> str:
        rewards = list(self.rewards)  # the event loop appends while the display thread reads
        mean = f"{sum(rewards) / len(rewards):+.3f}" if rewards else "-"  # the mean so far
        # most telling first: a narrow terminal cuts the end
        return (
            f"reward {mean}, resolved {self.resolved}, running {self.running}, graded {self.graded}, "
            f"dropped {self.dropped}, {self.groups} groups"
        )


def live_progress(stats: BatchStats, label: str, interval: float = INTERVAL) -> AbstractContextManager[None]:
    """Show ``stats`` while the batch runs. ``label`` names the step as the step's metrics line does
    (``step 3/10 rollout``), so the two are read together."""
    return show(stats, label, unit="samples", interval=interval)
