"""Off-policy rollouts (MAX_STALENESS >= 1), the slime / prime-rl / AReaL kind: which batches are in flight while a
step trains, and which samples are too old to train on.

What stays exact: every sample records the oldest weight version its trajectory was sampled with; the PPO ratio
against its rollout log-probs corrects for the lag where the server reported them (``train_on_batch``); the
driver's checkpointed data position excludes the batches in flight, so a resume serves them again.

With PARTIAL_ROLLOUTS the driver's ``submit``/``collect`` are a streaming pool's (``qwen_swe/rollout/pool.py``):
``collect`` returns the first complete groups and the rest carry over; ``Prefetch`` drives it unchanged, and a carried
group that ends too old comes back with a step's samples for ``drop_stale`` to drop.
"""

from __future__ import annotations

from collections.abc import Sequence

from qwen_swe.data.sample import Sample, drop, run_of
from qwen_swe.errors import DropReason, TrainerError
from qwen_swe.rollout.contract import AsyncRolloutSource, RolloutSource


class Prefetch:
    """Rank 0's view of the rollout pipeline: before step k trains, the batches of steps k+1..k+depth are running.

    A batch submitted while the trainer is at version v is trained at a version of at most v + depth: the
    staleness is bounded by ``depth`` (= MAX_STALENESS) by construction; ``drop_stale`` enforces it anyway.
    """

    def __init__(self, driver: RolloutSource, depth: int, first_step: int, last_step: int) -> None:
        if not isinstance(driver, AsyncRolloutSource):
            raise TrainerError(
                f"MAX_STALENESS={depth} needs a driver with submit/collect; "
                f"{type(driver).__name__} has none: set MAX_STALENESS=0"
            )
        self.driver, self.depth, self.next, self.last = driver, depth, first_step, last_step

    def batch(self, step: int, version: int) -> tuple[list[Sample], dict]:
        if self.next <= step:  # nothing in flight for this step (the first step, or a resume)
            self.driver.submit(step, version)
            self.next = step + 1
        samples, metrics = self.driver.collect(step)
        while self.next <= min(step + self.depth, self.last):
            self.driver.submit(self.next, version)
            self.next += 1
        return samples, metrics


def drop_stale(samples: Sequence[Sample], version: int, max_staleness: int) -> tuple[list[Sample], dict]:
    """Keep the groups whose every sample is at most ``max_staleness`` versions behind ``version``.

    A sample's version is the oldest its trajectory was sampled with (``RunRecord.weight_version``). A group loses
    all its samples when one is too old: its advantages are relative to the whole group. The staleness of the kept
    samples goes into the metrics; so do the stale ones without rollout log-probs, for which the PPO ratio is 1
    (the trainer's own log-probs stand in for the behaviour policy's, and nothing corrects for the lag).
    """
    staleness = {id(s): version - _started_on(s, version) for s in samples}
    stale_groups = {s.group_index for s in samples if staleness[id(s)] > max_staleness}
    kept, dropped = [], 0
    for s in samples:
        if s.group_index in stale_groups:
            drop(s, DropReason.STALE, f"{staleness[id(s)]} versions behind the trainer (MAX_STALENESS={max_staleness})")
            dropped += 1
        else:
            kept.append(s)
    values = [staleness[id(s)] for s in kept]
    metrics: dict[str, float] = {
        "async/staleness_mean": sum(values) / len(values) if values else 0.0,
        "async/staleness_max": max(values, default=0),
        f"dropped/{DropReason.STALE.value}": dropped,
        "async/uncorrected_stale_samples": sum(staleness[id(s)] > 0 and s.rollout_log_probs is None for s in kept),
    }
    for lag in sorted(set(values)):
        metrics[f"async/staleness_{lag}"] = values.count(lag)
    return kept, metrics


def _started_on(sample: Sample, default: int) -> int:
    started = run_of(sample).weight_version
    return default if started is None else int(started)
