"""The run's data source: per-epoch shuffle, groups of ``n_samples_per_prompt`` samples, and a resumable position.

``SWEBenchDataSource`` follows slime's DataSource plugin contract (``cls(args)``, ``get_samples``,
``add_samples``, ``save``/``load``, ``__len__``) so the same class serves the built-in trainer and slime. Its
instances come from ``load_instances`` (``instances.py``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import random
import re
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from qwen_swe.data.instances import load_instances
from qwen_swe.data.prompts import build_prompt
from qwen_swe.data.sample import Sample
from qwen_swe.errors import DataError

try:  # inside a slime checkout, be a real slime DataSource so --data-source-path accepts us
    from slime.rollout.data_source import DataSource as _Base  # type: ignore[import-not-found]
except ImportError:
    _Base = object  # type: ignore[assignment,misc]

log = logging.getLogger(__name__)

STATE_VERSION = 1
_STATE_RE = re.compile(r"^data_source_state_(-?\d+)\.json$")


class SWEBenchDataSource(_Base):  # type: ignore[misc,valid-type]
    """Groups of ``n_samples_per_prompt`` samples per instance; every epoch serves each instance once, in a
    permutation fixed by (seed, epoch), so a run restored from ``save``/``load`` continues exactly."""

    def __init__(self, args: Any) -> None:
        source = getattr(args, "prompt_data", None)
        if not source:
            raise DataError(
                "the data source needs prompt_data (slime --prompt-data, or DATASET): "
                "a Hugging Face dataset name or a .json/.jsonl/.parquet file"
            )
        self.args = args
        self.n_samples_per_prompt = int(_arg(args, "n_samples_per_prompt", 2))
        if self.n_samples_per_prompt < 1:
            raise DataError(f"n_samples_per_prompt={self.n_samples_per_prompt}; use 1 or more (GRPO needs 2+)")
        self.shuffle = bool(_arg(args, "rollout_shuffle", True))
        self.seed = int(_arg(args, "rollout_seed", 42))
        self.save_dir = _arg(args, "save", None)
        self.load_dir = _arg(args, "load", None)
        self.dataset: list[dict[str, Any]] = load_instances(source, _arg(args, "instance_list", None))
        self.fingerprint = hashlib.sha1("\n".join(r["instance_id"] for r in self.dataset).encode()).hexdigest()
        self.epoch = 0
        self.offset = 0
        self.next_group_index = 0
        self.next_sample_index = 0
        self.buffer: list[list[Sample]] = []
        self._order = self._permutation(0)

    @classmethod
    def from_settings(cls, settings: Any) -> SWEBenchDataSource:
        """The data source for our own trainer: its position lives under OUTPUT_DIR, saved and resumed there."""
        out = str(settings.output_dir)
        return cls(
            SimpleNamespace(
                prompt_data=settings.dataset_source,
                n_samples_per_prompt=settings.n_samples,
                rollout_shuffle=True,
                rollout_seed=settings.seed,
                save=out,
                load=out,
                instance_list=settings.instance_list,
            )
        )

    def __len__(self) -> int:
        return len(self.dataset)

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + epoch).shuffle(order)
        return order

    def _next_group(self) -> list[Sample]:
        if self.offset >= len(self._order):
            self.epoch += 1
            self.offset = 0
            self._order = self._permutation(self.epoch)
        row = self.dataset[self._order[self.offset]]
        self.offset += 1
        prompt = build_prompt(row)
        iid = row["instance_id"]
        group = [
            Sample(
                group_index=self.next_group_index,
                index=self.next_sample_index + i,
                prompt=prompt,
                label=iid,
                metadata={**copy.deepcopy(row), "instance_id": iid},
            )
            for i in range(self.n_samples_per_prompt)
        ]
        self.next_group_index += 1
        self.next_sample_index += self.n_samples_per_prompt
        return group

    def get_samples(self, num_samples: int) -> list[list[Sample]]:
        """``num_samples`` groups: pushed-back groups first, then fresh ones in epoch order."""
        if not isinstance(num_samples, int) or num_samples < 0:
            raise DataError(f"get_samples({num_samples!r}): ask for a non-negative whole number of groups")
        groups: list[list[Sample]] = []
        while self.buffer and len(groups) < num_samples:
            groups.append(self.buffer.pop(0))
        while len(groups) < num_samples:
            groups.append(self._next_group())
        return groups

    def add_samples(self, samples: Iterable[list[Sample]]) -> None:
        """Push whole groups back (e.g. aborted ones); they are served before any new instance."""
        groups = list(samples)
        for n, group in enumerate(groups):
            if not isinstance(group, list) or len(group) != self.n_samples_per_prompt:
                size = len(group) if isinstance(group, list) else type(group).__name__
                raise DataError(
                    f"add_samples: group {n} has {size} samples, expected n_samples_per_prompt="
                    f"{self.n_samples_per_prompt}; push back whole groups"
                )
        self.buffer.extend(groups)

    # --- position: save / load -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "offset": self.offset,
            "next_group_index": self.next_group_index,
            "next_sample_index": self.next_sample_index,
            "buffer_size": len(self.buffer),
            "n_instances": len(self.dataset),
            "fingerprint": self.fingerprint,
            "seed": self.seed,
            "shuffle": self.shuffle,
        }

    def load_state_dict(self, state: dict[str, Any], origin: str = "the saved data-source state") -> None:
        try:
            epoch, offset = int(state["epoch"]), int(state["offset"])
            group_index, sample_index = int(state["next_group_index"]), int(state["next_sample_index"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(
                f"{origin} is incomplete or malformed ({exc!r}); delete it to start from the beginning"
            ) from None
        if (state.get("n_instances"), state.get("fingerprint")) != (len(self.dataset), self.fingerprint):
            raise DataError(
                f"{origin} was saved for a different set of instances ({state.get('n_instances')} "
                f"instances, now {len(self.dataset)}); resume with the same DATASET and INSTANCE_LIST, "
                "or start a fresh run folder"
            )
        if (state.get("seed"), state.get("shuffle")) != (self.seed, self.shuffle):
            raise DataError(
                f"{origin} was saved with seed={state.get('seed')} shuffle={state.get('shuffle')}, "
                f"now seed={self.seed} shuffle={self.shuffle}; resume with the same seed, "
                "or start a fresh run folder"
            )
        if not 0 <= offset <= len(self.dataset) or epoch < 0:
            raise DataError(
                f"{origin} has epoch={epoch} offset={offset} for {len(self.dataset)} instances; "
                "delete it to start from the beginning"
            )
        if state.get("buffer_size"):
            log.warning(
                "%s had %s pushed-back groups; they are not saved and will not be served", origin, state["buffer_size"]
            )
        self.epoch, self.offset = epoch, offset
        self.next_group_index, self.next_sample_index = group_index, sample_index
        self._order = self._permutation(epoch)
        self.buffer = []

    def state_path(self, directory: str | os.PathLike[str], rollout_id: int) -> Path:
        return Path(directory).expanduser() / "rollout" / f"data_source_state_{rollout_id}.json"

    def save(self, rollout_id: int) -> Path | None:
        """Write the position after ``rollout_id`` under ``save`` atomically (a crash leaves the old file)."""
        if self.save_dir is None:
            return None
        path = self.state_path(self.save_dir, rollout_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({**self.state_dict(), "rollout_id": rollout_id}, indent=1) + "\n")
        os.replace(tmp, path)
        return path

    def load(self, rollout_id: int | None = None) -> bool:
        """Restore the position saved for ``rollout_id`` (default: the latest) from ``load``; False when there is
        none (a fresh start, as slime's own data source does)."""
        if self.load_dir is None:
            return False
        folder = Path(self.load_dir).expanduser() / "rollout"
        if rollout_id is None:
            found = [
                int(m.group(1)) for p in (folder.iterdir() if folder.is_dir() else []) if (m := _STATE_RE.match(p.name))
            ]
            if not found:
                return False
            rollout_id = max(found)
        path = self.state_path(self.load_dir, rollout_id)
        if not path.is_file():
            return False
        try:
            state = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise DataError(
                f"data-source state {path} cannot be read ({exc}); delete it to resume from an earlier one"
            ) from None
        if not isinstance(state, dict):
            raise DataError(f"data-source state {path} is not a JSON object; delete it")
        self.load_state_dict(state, origin=f"data-source state {path}")
        return True


def _arg(args: Any, name: str, default: Any) -> Any:
    value = getattr(args, name, None)
    return default if value is None else value
