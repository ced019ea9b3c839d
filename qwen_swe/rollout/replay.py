"""The trainer's driver for ``LOAD_ROLLOUT_DATA``: step N trains on the groups a run saved as
``rollout_data/step_N.jsonl.gz`` (``SAVE_ROLLOUT_DATA``), as slime's ``--load-debug-rollout-data`` does. No
server, no containers: a step's update can be rerun from the same weights with other trainer settings (learning
rate, loss, LoRA) and measured with ``python -m qwen_swe.train.probe``.

    python -m qwen_swe.rollout.replay pool --out POOLED RUN/rollout_data/step_00000[0-3].jsonl.gz

writes the groups of several saved steps as one step, ``POOLED/step_000000.jsonl.gz``: replayed, it is one update
over all of them (what a step with that many groups would have trained on)."""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path
from typing import Any

from qwen_swe.config.settings import Settings
from qwen_swe.data.records import read_records
from qwen_swe.data.sample import Sample, Status, stamp
from qwen_swe.errors import DataError
from qwen_swe.rollout.contract import WeightUpdate
from qwen_swe.rollout.record import dump_rollout_data
from qwen_swe.rollout.sampling import rewards_differ

FIELDS = ("group_index", "reward", "tokens", "response_length", "loss_mask", "rollout_log_probs")


def load_step(path: Path) -> list[Sample]:
    """A saved step's samples, groups renumbered from 0 in the order they were saved."""
    if not path.is_file():
        raise DataError(
            f"{path} does not exist: LOAD_ROLLOUT_DATA must be a run's rollout_data folder with a file "
            "for every step replayed (set NUM_ROLLOUTS to at most the steps it holds)"
        )
    samples: list[Sample] = []
    groups: dict[tuple[Any, Any], int] = {}
    with gzip.open(path, "rt") as fh:
        for row in read_records(fh, path, FIELDS, "it was not written by SAVE_ROLLOUT_DATA"):
            group = groups.setdefault((row["group_index"], row.get("instance_id")), len(groups))
            samples.append(
                Sample(
                    group_index=group,
                    index=row.get("index"),
                    tokens=row["tokens"],
                    response_length=row["response_length"],
                    loss_mask=row["loss_mask"],
                    rollout_log_probs=row["rollout_log_probs"],
                    reward=float(row["reward"]),
                    status=Status.COMPLETED,
                    metadata={"instance_id": row.get("instance_id"), "resolved": row.get("resolved")},
                )
            )
    return samples


class ReplayDriver:
    """Step N's samples from ``step_N.jsonl.gz``, stamped with the trainer's weight version."""

    def __init__(self, settings: Settings) -> None:
        self.folder = Path(settings.train.load_rollout_data or "")
        if not self.folder.is_dir():
            raise DataError(f"LOAD_ROLLOUT_DATA={self.folder} is not a folder: pass a run's OUTPUT_DIR/rollout_data")

    def generate(self, step: int, weight_version: int) -> tuple[list[Sample], dict[str, Any]]:
        samples = load_step(self.folder / f"step_{step:06d}.jsonl.gz")
        for x in samples:
            stamp(x, weight_version=weight_version)
        return samples, {}

    def sync_weights(self, update: WeightUpdate) -> None:
        """Nothing serves a replay: the exported folder is the result."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


def pool(files: list[Path], out: Path) -> dict[str, int]:
    """The groups of ``files`` (saved steps) as one step file ``out``, groups renumbered across files."""
    groups: list[list[Sample]] = []
    for f in files:
        step: dict[int, list[Sample]] = {}
        for x in load_step(f):
            step.setdefault(x.group_index, []).append(x)
        groups += step.values()
    for i, g in enumerate(groups):
        for x in g:
            x.group_index = i
    dump_rollout_data(out, groups)
    return {
        "steps": len(files),
        "groups": len(groups),
        "with_both_outcomes": sum(map(rewards_differ, groups)),
        "samples": sum(map(len, groups)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qwen_swe.rollout.replay", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pool", help="write saved steps' groups as one step, step_000000.jsonl.gz of --out")
    p.add_argument("steps", type=Path, nargs="+", help="step_N.jsonl.gz files written by SAVE_ROLLOUT_DATA")
    p.add_argument("--out", type=Path, required=True, help="a folder to pass as LOAD_ROLLOUT_DATA")
    args = ap.parse_args(argv)
    missing = [str(f) for f in args.steps if not f.is_file()]
    if missing:
        raise SystemExit(f"{', '.join(missing)}: no such file; pass step_N.jsonl.gz files of a run's rollout_data")
    out = args.out / "step_000000.jsonl.gz"
    if out.exists():
        raise SystemExit(f"{out} exists: pass a new --out folder")
    n = pool(args.steps, out)
    print(
        f"pooled {n['steps']} steps: {n['groups']} groups ({n['with_both_outcomes']} with both outcomes, the ones "
        f"GRPO trains on), {n['samples']} samples -> {out}; replay it with LOAD_ROLLOUT_DATA={args.out} NUM_ROLLOUTS=1"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
