"""Where a step's scalars go besides ``metrics.jsonl`` (REPORT_TO): TensorBoard (``OUTPUT_DIR/tb``) and Weights &
Biases (``OUTPUT_DIR/wandb``). Both get the same scalars at the same step; wandb also gets a table of the step's
sampled trajectories and, at the end, the reward and evaluation curves as drawn in ``rewards.png``.

wandb is configured by its own environment variables (``WANDB_PROJECT``, ``WANDB_ENTITY``, ``WANDB_MODE=offline``
for a machine without its service, ``WANDB_API_KEY``); the run's id is kept in ``OUTPUT_DIR/wandb/run_id``, so a
resumed run continues the same wandb run.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from qwen_swe.errors import ConfigError

REPORTERS = ("tensorboard", "wandb")
TABLE_ROWS = 64  # trajectories a step's table keeps at most, spread over the step's samples
PATCH_CHARS = 4000  # of each patch in the table; the whole one is in rollouts/step_N.jsonl
DEFAULT_PROJECT = "qwen-swe"


class Sink(Protocol):
    def log(self, scalars: dict[str, float], step: int) -> None: ...

    def close(self, curves: Path | None) -> None: ...


def parse_report_to(value: str) -> tuple[str, ...]:
    """``tensorboard,wandb`` -> ("tensorboard", "wandb"); empty = none; an unknown name is a ConfigError."""
    names = tuple(dict.fromkeys(n.strip().lower() for n in value.split(",") if n.strip()))
    unknown = [n for n in names if n not in REPORTERS]
    if unknown:
        raise ConfigError(
            f"REPORT_TO={value!r}: {', '.join(unknown)} is not one of {', '.join(REPORTERS)} "
            "(comma-separated; empty = metrics.jsonl only)"
        )
    return names


def make_sinks(names: Sequence[str], run_dir: Path, resume_step: int, config: dict[str, Any] | None) -> list[Sink]:
    sinks: list[Sink] = []
    for name in names:
        sinks.append(
            TensorBoardSink(run_dir, resume_step)
            if name == "tensorboard"
            else WandbSink(run_dir, resume_step, config or {})
        )
    return sinks


class TensorBoardSink:
    """Scalars under ``run_dir/tb``; on resume, events of steps at or after the resumed one are purged."""

    def __init__(self, run_dir: Path, resume_step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter  # late: pulls in tensorboard

        self.writer = SummaryWriter(str(run_dir / "tb"), purge_step=resume_step if resume_step else None)

    def log(self, scalars: dict[str, float], step: int) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self, curves: Path | None) -> None:
        self.writer.close()


class WandbSink:
    """One wandb run per run folder, its files under ``run_dir/wandb``."""

    def __init__(self, run_dir: Path, resume_step: int, config: dict[str, Any]) -> None:
        try:
            import wandb  # late: only REPORT_TO=wandb needs it
        except ImportError:
            raise ConfigError(
                "REPORT_TO names wandb, which is not installed: pip install -r requirements.txt "
                "(it pins wandb), or drop wandb from REPORT_TO"
            ) from None
        self.wandb, self.run_dir, self.last_step = wandb, run_dir, -1
        folder = run_dir / "wandb"
        folder.mkdir(parents=True, exist_ok=True)
        id_file = folder / "run_id"
        if not id_file.is_file():
            id_file.write_text(uuid.uuid4().hex[:12] + "\n")
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
            dir=str(run_dir),
            id=id_file.read_text().strip(),
            resume="allow",
            name=run_dir.resolve().name,
            config=config,
            settings=wandb.Settings(console="off"),
        )
        self.run.define_metric("eval/*", summary="max")

    def log(self, scalars: dict[str, float], step: int) -> None:
        data: dict[str, Any] = dict(scalars)
        rows = trajectory_rows(self.run_dir / "rollouts" / f"step_{step:06d}.jsonl", step)
        if rows:
            data["trajectories"] = self.wandb.Table(
                columns=list(rows[0]), data=[list(r.values()) for r in rows], allow_mixed_types=True
            )
        self.run.log(data, step=step)
        self.last_step = step

    def close(self, curves: Path | None) -> None:
        try:
            if curves is not None and curves.is_file() and self.last_step >= 0:
                self.run.log({"curves": self.wandb.Image(str(curves))}, step=self.last_step)
        finally:
            self.run.finish()
            # finish() can return before wandb's service process has written the run's last records to its
            # .wandb file; teardown waits for that process to end, so the run folder is complete on return
            self.wandb.teardown()


def trajectory_rows(path: Path, step: int, limit: int = TABLE_ROWS) -> list[dict[str, Any]]:
    """Up to ``limit`` of a step's recorded samples (``rollouts/step_N.jsonl``), evenly spread, as table rows."""
    try:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []
    stride = max(1, math.ceil(len(records) / limit))
    return [
        {
            "step": step,
            "instance_id": r.get("instance_id"),
            "group": r.get("group_index"),
            "sample": r.get("index"),
            "status": r.get("status"),
            "reward": r.get("reward"),
            "resolved": r.get("resolved"),
            "outcome": r.get("outcome"),
            "turns": r.get("turns"),
            "response_length": r.get("response_length"),
            "weight_version": r.get("weight_version"),
            "drop_reason": r.get("drop_reason"),
            "patch": (r.get("patch") or "")[:PATCH_CHARS],
        }
        for r in records[::stride][:limit]
    ]
