"""Which of a step's groups are trained on. Plain: every complete group. Dynamic (DAPO's dynamic sampling, slime's
``check_reward_nonzero_std`` filter with over-sampling): only groups whose rewards differ, since a group of equal
rewards has zero advantage everywhere; the groups filtered out are replaced by newly drawn ones, round after round,
until the batch is full or SAMPLING_ROUNDS ran."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from qwen_swe.data.sample import Sample, stamp
from qwen_swe.train.grpo import zero_variance_mask

Groups = list[list[Sample]]

EQUAL_REWARDS = "equal_rewards"
GROUP_DROPPED = "group_dropped"  # graded, but a sibling was dropped by the infrastructure, and the group with it


def rewards_differ(group: list[Sample]) -> bool:
    """GRPO's advantages of ``group`` are not all zero: the trainer's own test of a group's rewards."""
    return not bool(zero_variance_mask(torch.tensor([[float(x.reward) for x in group]]))[0])


@dataclass
class Batch:
    """One step's groups: every group drawn, the complete ones (no sample lost to infrastructure), the trained ones."""

    drawn: Groups = field(default_factory=list)
    complete: Groups = field(default_factory=list)
    trained: Groups = field(default_factory=list)
    rounds: int = 0

    def metrics(self) -> dict[str, float]:
        return {
            "sampling/rounds": self.rounds,
            "sampling/groups_drawn": len(self.drawn),
            "sampling/groups_trained": len(self.trained),
            "sampling/groups_filtered": len(self.complete) - len(self.trained),
        }


def fill_batch(
    draw: Callable[[int], Groups], run: Callable[[Groups], Groups], size: int, *, dynamic: bool, rounds: int
) -> Batch:
    """Draw ``size`` groups and run them (``run`` returns the complete ones); draw again for the missing ones, at
    most ``rounds`` times in all. With ``dynamic``, only groups whose rewards differ count towards ``size``.

    The one place lost groups are refilled: the built-in driver (dynamic sampling's rounds, else one round) and
    slime's rollout function (which must return exactly ``size`` groups) both call it."""
    batch = Batch()
    for _ in range(rounds):
        groups = draw(size - len(batch.trained))
        if not groups:
            break
        batch.rounds += 1
        batch.drawn += groups
        for group in run(groups):
            batch.complete.append(group)
            if not dynamic or rewards_differ(group):
                batch.trained.append(group)
            else:
                for x in group:
                    stamp(x, filtered=EQUAL_REWARDS)
        if len(batch.trained) >= size:
            break
    return batch
