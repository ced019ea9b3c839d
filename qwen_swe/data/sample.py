"""The training sample: slime's ``Sample`` when slime is importable, else a type with the same fields; and the
``RunRecord`` of the attempt this project keeps in its ``metadata``.

Only the fields this project reads or writes are declared on the fallback; their names, defaults and
the ``Status`` values match slime v0.2.2's ``slime.utils.types.Sample``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from qwen_swe.errors import DropReason

try:  # inside a slime checkout, emit slime's own type so its trainer accepts our samples as-is
    from slime.utils.types import Sample  # type: ignore[import-not-found]
except ImportError:

    @dataclass
    class Sample:  # type: ignore[no-redef]
        """A project sample with slime v0.2.2's field names and semantics."""

        class Status(Enum):
            PENDING = "pending"
            COMPLETED = "completed"
            TRUNCATED = "truncated"
            ABORTED = "aborted"
            FAILED = "failed"

        group_index: int | None = None
        index: int | None = None
        prompt: str | list[dict[str, Any]] = ""
        tokens: list[int] = field(default_factory=list)  # prompt ids + response ids
        response: str = ""
        response_length: int = 0
        label: str | None = None
        reward: float | dict[str, Any] | None = None
        loss_mask: list[int] | None = None  # len == response_length; 1 = sampled by the model
        weight_versions: list[str] = field(default_factory=list)
        rollout_log_probs: list[float] | None = None  # aligned with the response
        remove_sample: bool = False
        status: Sample.Status = None  # type: ignore[assignment]
        metadata: dict[str, Any] = field(default_factory=dict)
        train_metadata: dict[str, Any] | None = None
        non_generation_time: float = 0.0

        def __post_init__(self) -> None:
            if self.status is None:
                self.status = Sample.Status.PENDING

        @property
        def effective_response_length(self) -> int:
            return sum(self.loss_mask) if self.loss_mask is not None else self.response_length

        def to_dict(self) -> dict[str, Any]:
            out = dict(self.__dict__)
            out["status"] = self.status.value
            return out


Status = Sample.Status


@dataclass
class RunRecord:
    """What one attempt adds to its sample, beyond slime's fields: read by attribute (``run_of``), written with
    ``stamp``. It travels in slime's ``metadata`` dict under these field names (the sample stays slime's type, and
    the dumps keep their keys); everything else in ``metadata`` is the instance's row. A retry starts from the row
    alone (``attempt_row``), so nothing of a failed attempt can leak into the next."""

    weight_version: int | None = None  # the version the attempt started on (the oldest its turns used)
    attempt_seed: int | None = None  # an evaluation attempt's sampling seed
    rollout_node: str | None = None  # the Ray node it ran on (ROLLOUT_BACKEND=ray)
    outcome: str | None = None  # the agent's: completed, timeout, ...
    patch: str | None = None
    final_message: str | None = None
    agent_seconds: float | None = None
    tool_calls: int | None = None
    conversation: list[dict[str, Any]] | None = None
    turns: int | None = None
    trajectory: dict[str, Any] | None = None  # the token-level trajectory's figures
    resolved: bool | None = None
    reward_hack_suspected: bool | None = None
    f2p_passed: float | None = None
    p2p_passed: float | None = None
    grade_details: dict[str, Any] | None = None
    grade_timings: dict[str, float] | None = None
    grade_seconds: float | None = None
    drop_reason: str | None = None  # a DropReason's value: the infrastructure's, never trained on
    drop_detail: str | None = None
    filtered: str | None = None  # complete, but its group was not trained on (equal rewards, a dropped sibling)
    timeline: dict[str, Any] | None = None  # where the attempt's time went (qwen_swe/rollout/timeline.py)


RUN_FIELDS = frozenset(f.name for f in fields(RunRecord))


def run_of(sample: Sample) -> RunRecord:
    """The attempt's record (fields it has not reached yet are ``None``)."""
    return RunRecord(**{k: v for k, v in sample.metadata.items() if k in RUN_FIELDS})


def stamp(sample: Sample, **values: Any) -> Sample:
    """Record ``values`` on ``sample``; a name that is not a ``RunRecord`` field is a TypeError naming it."""
    RunRecord(**values)
    sample.metadata.update(values)
    return sample


def attempt_row(sample: Sample) -> dict[str, Any]:
    """The instance's own fields: the sample's metadata without any attempt's record."""
    return {k: v for k, v in sample.metadata.items() if k not in RUN_FIELDS}


def drop(sample: Sample, reason: DropReason, detail: str) -> Sample:
    """Mark ``sample`` as dropped by the infrastructure (or as too stale): never trained on, never scored."""
    sample.status = Status.ABORTED
    sample.remove_sample = True
    sample.reward = 0.0
    return stamp(sample, drop_reason=reason.value, drop_detail=detail)
