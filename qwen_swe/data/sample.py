"""The training sample: slime's ``Sample`` when slime is importable, else a type with the same fields.

Only the fields this project reads or writes are declared on the fallback; their names, defaults and
the ``Status`` values match slime v0.2.2's ``slime.utils.types.Sample``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

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
        status: "Sample.Status" = None  # type: ignore[assignment]
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
