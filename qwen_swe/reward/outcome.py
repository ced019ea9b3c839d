"""What a grade returns (``Grade``: reward, verdict, status, details, phase times) and the record a grade in
progress keeps (``Record``), which builds every ``Grade`` so no caller assembles one field by field."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any


class GradeStatus(str, Enum):
    GRADED = "graded"  # the verdict is the model's: +1 or -1 (or a mode's value)
    ABORTED = "aborted"  # infrastructure failed: the sample is dropped, never scored


@dataclass
class Grade:
    reward: float
    resolved: bool
    status: GradeStatus
    reason: str | None
    f2p_passed: float
    p2p_passed: float
    details: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def aborted(self) -> bool:
        return self.status == GradeStatus.ABORTED


@dataclass
class Record:
    """One grade in progress: its row, what it has found (``details``, written to grade.json) and its phase times."""

    instance: dict
    details: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)
    folder: Path = Path()  # the grade's own log folder, made when a machine is about to run

    def failed(self, reason: str) -> Grade:
        return self.verdict(-1.0, GradeStatus.GRADED, reason)

    def aborted(self, reason: str) -> Grade:
        return self.verdict(0.0, GradeStatus.ABORTED, reason)

    def verdict(
        self,
        reward: float,
        status: GradeStatus,
        reason: str | None,
        resolved: bool = False,
        f2p: float = 0.0,
        p2p: float = 0.0,
    ) -> Grade:
        return Grade(
            reward=reward,
            resolved=resolved,
            status=status,
            reason=reason,
            f2p_passed=f2p,
            p2p_passed=p2p,
            details=self.details,
            timings=self.timings,
        )

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        """Record the phase's seconds when it finishes; a phase that raises is not timed."""
        t = time.monotonic()
        yield
        self.timings[phase] = time.monotonic() - t
