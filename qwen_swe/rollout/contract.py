"""The boundary between the trainer and whatever produces its rollouts, in one place.

The trainer (rank 0) talks to a ``RolloutSource``: a batch of samples sampled with a given weight version, new
weights to serve before the next batch, a checkpointable position, a close. ``AsyncRolloutSource`` adds the
background path of MAX_STALENESS >= 1 (``submit`` now, ``collect`` later). The built-in driver, the replay and
warm-start drivers and the tests' drivers implement it; where the samples of a batch run (this process or Ray
workers) is a ``RolloutRunner``, which the built-in driver and slime's rollout function share. What a batch holds is
slime's ``Sample`` with this project's ``RunRecord`` (``qwen_swe/data/sample.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from qwen_swe.data.sample import Sample
from qwen_swe.rollout.progress import BatchStats


@dataclass(frozen=True)
class WeightUpdate:
    """Weights the trainer publishes as ``version``: an HF folder on disk, or (WEIGHT_SYNC=broadcast) a stream of
    ``(checkpoint name, tensor)`` buckets that must be drained whatever happens."""

    version: int
    folder: Path | None = None
    buckets: Iterator[Any] | None = None

    def __post_init__(self) -> None:
        if (self.folder is None) == (self.buckets is None):
            raise ValueError(
                f"WeightUpdate v{self.version}: exactly one of folder and buckets, "
                f"got folder={self.folder!r}, buckets={self.buckets!r}"
            )

    @property
    def payload(self) -> Any:
        """What a ``WeightSync.push`` takes: the folder or the bucket stream."""
        return self.folder if self.folder is not None else self.buckets


class RolloutSource(Protocol):
    """Rank 0's rollout side of the built-in trainer."""

    def generate(self, step: int, weight_version: int) -> tuple[list[Sample], dict[str, Any]]:
        """``step``'s samples, every one sampled with ``weight_version`` (stamped on it)."""
        ...

    def sync_weights(self, update: WeightUpdate) -> None:
        """Serve ``update`` before the next batch is sampled."""
        ...

    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


@runtime_checkable
class AsyncRolloutSource(Protocol):
    """MAX_STALENESS >= 1: a batch starts with ``submit`` and runs in the background until ``collect``; its
    ``state_dict`` is the data position from before the oldest batch still in flight was drawn."""

    def submit(self, step: int, weight_version: int) -> None: ...
    def collect(self, step: int) -> tuple[list[Sample], dict[str, Any]]: ...


class RolloutRunner(Protocol):
    """Where a batch's samples run: ``RolloutEngine`` (this process) or ``RayRolloutPool`` (Ray workers)."""

    served_model: str

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def begin_sync(self, version: int) -> None: ...
    def set_weight_version(self, version: int) -> None: ...
    async def run_groups(self, groups: list[list[Sample]], stats: BatchStats) -> list[list[Sample]]: ...
    async def run_sample(self, sample: Sample, stats: BatchStats) -> Sample: ...
