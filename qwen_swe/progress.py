"""Live progress of a long job (a rollout batch, an evaluation, grading, task generation, the warm start).

On a terminal: a bar with the count done of the total, the rate, the time elapsed and the ETA (rich.progress). On
anything else (Slurm, nohup, a pipe into a file): the same figures as a plain flushed line every ``interval`` seconds
and once at the end, so a log of hours shows where a job is without waiting for it to finish. The rate and the ETA
are averages over the whole job, not rich's window of recent completions: a rollout finishes every few minutes,
and a window of seconds would leave the ETA blank most of the time.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Protocol

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.table import Column
from rich.text import Text

INTERVAL = 30.0  # seconds between plain lines; the warm start's phases print at the same pace
REFRESH = 0.5  # seconds between reads of the counts for the bar


class Counts(Protocol):
    """What a display reads: ``done`` of ``total`` (0 = not known yet) and a short detail (``resolved 3``)."""

    @property
    def done(self) -> int: ...

    @property
    def total(self) -> int: ...

    def detail(self) -> str: ...


@dataclass
class Meter:
    """Counts for jobs that are not rollout batches: ``advance`` as each item ends, with named tallies if any."""

    total: int = 0
    done: int = 0
    tallies: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def advance(self, n: int = 1, **tallies: int) -> None:
        """``n`` more items done; thread-safe, as the generator's judges run in a thread pool."""
        with self._lock:
            self.done += n
            for key, value in tallies.items():
                self.tallies[key] = self.tallies.get(key, 0) + value

    def detail(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.tallies.items())


def format_seconds(seconds: float) -> str:
    """``1h02m``, ``12m05s``, ``7s``: jobs last minutes to hours; seconds alone are hard to read."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def format_rate(done: int, seconds: float, unit: str) -> str:
    """Items a minute below one a second (rollouts, SFT steps), else a second (mutations judged)."""
    per_second, unit = done / seconds if seconds > 0 else 0.0, f" {unit}" if unit else ""
    return f"{per_second:.1f}{unit}/s" if per_second >= 1 else f"{per_second * 60:.2f}{unit}/min"


def eta_seconds(done: int, total: int, seconds: float) -> float | None:
    """Time left at the average pace so far; unknown before the first item ends or without a total."""
    if done <= 0 or total <= 0:
        return None
    return max(0, total - done) * seconds / done


def step_label(step: int, steps: int, what: str) -> str:
    """``step 3/10 rollout`` for the 0-based ``step`` 2: one numbering for a step's progress and its metrics line."""
    return f"step {step + 1}/{steps} {what}"


def line(label: str, counts: Counts, seconds: float, unit: str) -> str:
    """The plain line: ``step 3/10 rollout: 12/32 samples, 0.85 samples/min, 14m07s elapsed, ETA 23m32s; ...``."""
    done, total = counts.done, counts.total
    figures = [f"{done}/{total} {unit}" if total else f"{done} {unit}" if done else ""]
    if done:
        figures.append(format_rate(done, seconds, unit))
    figures.append(f"{format_seconds(seconds)} elapsed")
    text = f"{label}: " + ", ".join(f for f in figures if f)
    eta = eta_seconds(done, total, seconds)
    if eta is not None and done < total:
        text += f", ETA {format_seconds(eta)}"
    detail = counts.detail()
    return f"{text}; {detail}" if detail else text


@contextmanager
def show(
    counts: Counts,
    label: str,
    unit: str = "samples",
    interval: float = INTERVAL,
    file: IO[str] | None = None,
    force_terminal: bool | None = None,
) -> Iterator[None]:
    """Display ``counts`` while the block runs: a bar on a terminal, else a line every ``interval`` seconds and a
    last one when the block ends (also when it fails, so a log shows how far a failed job got)."""
    console = Console(file=file or sys.stderr, force_terminal=force_terminal)
    view = _Bar(console, counts, label, unit) if console.is_terminal else _Lines(console, counts, label, unit, interval)
    with view:
        yield


class _Ticker:
    """A daemon thread calling ``tick`` every ``period`` seconds until stopped, and once more at the end."""

    def __init__(self, period: float, name: str) -> None:
        self.period, self.stopped = period, threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.start = time.monotonic()

    def tick(self, end: str = "") -> None:
        """Show the counts now; ``end`` is "done" or "stopped" on the last call."""
        raise NotImplementedError

    def _run(self) -> None:
        while not self.stopped.wait(self.period):
            self.tick()

    def __enter__(self) -> _Ticker:
        self.start = time.monotonic()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        self.tick(end="done" if exc[0] is None else "stopped")


class _Lines(_Ticker):
    def __init__(self, console: Console, counts: Counts, label: str, unit: str, interval: float) -> None:
        super().__init__(interval, f"progress-{label}")
        self.console, self.counts, self.label, self.unit = console, counts, label, unit

    def tick(self, end: str = "") -> None:
        text = line(self.label, self.counts, time.monotonic() - self.start, self.unit)
        print(f"{text} ({end})" if end else text, file=self.console.file, flush=True)


class _Detail(ProgressColumn):
    """The counts' detail, cut with an ellipsis where the terminal is too narrow, never wrapped under the bar."""

    def render(self, task: Task) -> Text:
        return Text(str(task.fields.get("detail", "")), no_wrap=True, overflow="ellipsis")


class _Bar(_Ticker):
    def __init__(self, console: Console, counts: Counts, label: str, unit: str) -> None:
        super().__init__(REFRESH, f"progress-{label}")
        self.counts, self.unit = counts, unit

        # only the detail gives way on a narrow terminal: the figures keep their width
        def fixed(text: str) -> TextColumn:
            return TextColumn(text, table_column=Column(no_wrap=True))

        self.bar = Progress(
            fixed("[bold]{task.description}"),
            BarColumn(bar_width=20),
            fixed("{task.completed}/{task.fields[of]} {task.fields[unit]}"),
            fixed("{task.fields[rate]}"),
            TimeElapsedColumn(),
            fixed("ETA {task.fields[eta]}"),
            _Detail(table_column=Column(overflow="ellipsis")),
            console=console,
            refresh_per_second=2,
        )
        self.task = self.bar.add_task(label, total=None, unit=unit, of="?", rate="", eta="-", detail="")

    def tick(self, end: str = "") -> None:
        done, total, seconds = self.counts.done, self.counts.total, time.monotonic() - self.start
        eta = eta_seconds(done, total, seconds)
        self.bar.update(
            self.task,
            completed=done,
            total=total or None,
            of=total or "?",
            detail=self.counts.detail(),
            rate=format_rate(done, seconds, "") if done else "",
            eta=format_seconds(eta) if eta is not None else "-",
        )

    def __enter__(self) -> _Bar:
        self.tick()
        self.bar.start()
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self.bar.stop()
