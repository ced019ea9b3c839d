"""The checkpoints slime writes under ``--save`` (FSDP layout of slime v0.2.2, ``slime/backends/fsdp_utils/
checkpoint.py``)::

    {save}/latest_checkpointed_iteration.txt   "<rollout_id + 1>", written last by rank 0
    {save}/iter_{rollout_id + 1:07d}/model/     torch.distributed.checkpoint of {"model_state": {"model": sd}}
    {save}/iter_{rollout_id + 1:07d}/meta.json  iteration, rollout_id, next_rollout_id, global_step, ...

Found without a process group: a checkpoint counts once the tracker names it and DCP's ``.metadata`` exists.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from qwen_swe.errors import WeightSyncError

TRACKER = "latest_checkpointed_iteration.txt"
ITER_RE = re.compile(r"^iter_(\d{7,})$")


@dataclass(frozen=True)
class SlimeCheckpoint:
    """One complete checkpoint slime wrote: ``iteration`` = rollout_id + 1 of the step that produced it."""

    iteration: int
    path: Path

    @property
    def model_dir(self) -> Path:
        return self.path / "model"

    @property
    def rollout_id(self) -> int:
        return self.iteration - 1


# ------------------------------------------------------------------------------------------------
# finding checkpoints
# ------------------------------------------------------------------------------------------------


def read_tracker(save_dir: str | os.PathLike[str]) -> int | None:
    """The iteration in ``latest_checkpointed_iteration.txt`` (slime writes it after the checkpoint), or None."""
    path = Path(save_dir).expanduser() / TRACKER
    try:
        return int(path.read_text().strip())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise WeightSyncError(f"{path} is unreadable ({exc}); it should hold one iteration number") from None


def list_checkpoints(save_dir: str | os.PathLike[str]) -> list[SlimeCheckpoint]:
    """Complete checkpoints, oldest first: the DCP ``model/.metadata`` exists (DCP writes it last) and the
    iteration is not newer than the tracker (slime bumps the tracker only after a save finished)."""
    root = Path(save_dir).expanduser()
    tracker = read_tracker(root)
    if tracker is None or not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        m = ITER_RE.match(child.name)
        if m and int(m.group(1)) <= tracker and (child / "model" / ".metadata").is_file():
            found.append(SlimeCheckpoint(int(m.group(1)), child))
    return sorted(found, key=lambda c: c.iteration)


def newest_checkpoint(save_dir: str | os.PathLike[str]) -> SlimeCheckpoint | None:
    found = list_checkpoints(save_dir)
    return found[-1] if found else None
