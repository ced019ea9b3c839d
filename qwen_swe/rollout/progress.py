"""A live view of a rollout batch: groups, samples running / graded / dropped, and the reward so far."""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from rich.console import Console
from rich.live import Live
from rich.table import Table

from qwen_swe.data.sample import Sample, Status, run_of


@dataclass
class BatchStats:
    """Live counters for the progress display and the step's metrics."""

    groups: int = 0
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


def render(stats: BatchStats, title: str) -> Table:
    table = Table(title=title, expand=False)
    for col in ("groups", "running", "graded", "dropped", "reward mean", "resolved"):
        table.add_column(col, justify="right")
    mean = sum(stats.rewards) / len(stats.rewards) if stats.rewards else float("nan")
    table.add_row(str(stats.groups), str(stats.running), str(stats.graded), str(stats.dropped),
                  f"{mean:+.3f}", str(stats.resolved))
    return table


@contextmanager
def live_progress(stats: BatchStats, title: str) -> Iterator[None]:
    """Refresh the table while the batch runs (on a terminal); print it once at the end everywhere."""
    console = Console(file=sys.stderr)
    if not console.is_terminal:
        try:
            yield
        finally:
            console.print(render(stats, title))
        return
    stop = threading.Event()
    with Live(render(stats, title), console=console, refresh_per_second=2) as live:
        def refresh() -> None:
            while not stop.wait(0.5):
                live.update(render(stats, title))

        thread = threading.Thread(target=refresh, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=2)
            live.update(render(stats, title))
