"""SWE-bench instances for the run: loading, validation, per-epoch shuffle, groups, and a resumable position.

``load_instances`` turns a Hugging Face dataset (hub name or local folder) or a .json/.jsonl/.parquet file into
validated rows, so a bad row fails at start (naming the file, the row and the field) instead of inside a rollout.
``SWEBenchDataSource`` follows slime's DataSource plugin contract (``cls(args)``, ``get_samples``,
``add_samples``, ``save``/``load``, ``__len__``) so the same class serves the built-in trainer and slime.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import random
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from qwen_swe.data.prompts import build_prompt
from qwen_swe.data.sample import Sample
from qwen_swe.errors import DataError

try:  # inside a slime checkout, be a real slime DataSource so --data-source-path accepts us
    from slime.rollout.data_source import DataSource as _Base  # type: ignore[import-not-found]
except ImportError:
    _Base = object  # type: ignore[assignment,misc]

log = logging.getLogger(__name__)

STRING_FIELDS = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch", "version")
LIST_FIELDS = ("FAIL_TO_PASS", "PASS_TO_PASS")
V5_FIELDS = ("image", "eval_script", "log_parser", "eval_type")  # swebench 5.x carries these per row
EVAL_TYPES = ("pass_and_fail", "fail_only")
LOCAL_SUFFIXES = (".json", ".jsonl", ".parquet")
STATE_VERSION = 1
_STATE_RE = re.compile(r"^data_source_state_(-?\d+)\.json$")


# ------------------------------------------------------------------------------------------------
# loading and validation
# ------------------------------------------------------------------------------------------------


def load_instances(
    source: str | os.PathLike[str], instance_list: str | os.PathLike[str] | Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Validated rows from ``source`` (HF ``name[:split]``, a HF dataset folder, or a local file), in order,
    optionally restricted to the ids in ``instance_list`` (a file of ids, one a line, or a list of ids)."""
    origin, located = _read_rows(str(source))
    if not located:
        raise DataError(f"{origin} holds no rows; give a SWE-bench dataset with at least one instance")
    rows = [_validate_row(raw, where, origin) for where, raw in located]
    seen: dict[str, str] = {}
    for (where, _), row in zip(located, rows):
        iid = row["instance_id"]
        if iid in seen:
            raise DataError(
                f"{origin}: instance id {iid} appears twice ({seen[iid]} and {where}); remove the duplicate row"
            )
        seen[iid] = where
    if instance_list is None:
        return rows
    wanted, list_origin = read_instance_list(instance_list)
    unknown = [iid for iid in wanted if iid not in seen]
    if unknown:
        raise DataError(
            f"{len(unknown)} instance id(s) from {list_origin} are not in {origin}: "
            f"{', '.join(unknown)}; fix the ids or use the dataset that holds them"
        )
    keep = set(wanted)
    return [row for row in rows if row["instance_id"] in keep]


def read_instance_list(instance_list: str | os.PathLike[str] | Sequence[str]) -> tuple[list[str], str]:
    """The ids of an instance list and a description of where they came from (for error messages)."""
    if isinstance(instance_list, (str, os.PathLike)):
        path = Path(instance_list).expanduser()
        origin = f"instance list {path}"
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(
                f"{origin} cannot be read ({exc.__class__.__name__}: {exc}); "
                "give a readable text file of instance ids, one a line"
            ) from None
        ids = [line.split("#", 1)[0].strip() for line in text.splitlines()]
        ids = [i for i in ids if i]
    else:
        origin = "the given instance list"
        ids = list(instance_list)
        bad = [i for i in ids if not isinstance(i, str) or not i.strip()]
        if bad:
            raise DataError(f"{origin} holds entries that are not instance ids: {bad[:5]!r}; give non-empty strings")
        ids = [i.strip() for i in ids]
    if not ids:
        raise DataError(f"{origin} holds no instance ids; list at least one (one a line; '#' starts a comment)")
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise DataError(f"{origin} lists these instance ids more than once: {', '.join(dupes)}; list each once")
    return ids, origin


def _read_rows(source: str) -> tuple[str, list[tuple[str, Any]]]:
    """(origin, [(location, raw row)]) from a local file or a HF dataset."""
    path = Path(source).expanduser()
    folder, _, split = source.rpartition(":") if ":" in source else (source, "", "")
    if path.is_dir() or (folder and Path(folder).expanduser().is_dir()):
        # a Hugging Face dataset folder (e.g. a downloaded copy of the hub repo): datasets reads it offline
        return _read_hf(str(path) if path.is_dir() else f"{Path(folder).expanduser()}:{split}")
    if path.exists():
        suffix = path.suffix.lower()
        if suffix not in LOCAL_SUFFIXES:
            raise DataError(
                f"dataset {path} has the unknown extension {suffix or '(none)'!r}; "
                "give a .json, .jsonl or .parquet file, or a Hugging Face dataset name"
            )
        origin = str(path)
        try:
            if suffix == ".parquet":
                return origin, _read_parquet(path)
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(
                f"dataset {path} cannot be read ({exc.__class__.__name__}: {exc}); check the file and its permissions"
            ) from None
        if suffix == ".json":
            return origin, _parse_json(text, origin)
        return origin, _parse_jsonl(text, origin)
    if path.suffix.lower() in LOCAL_SUFFIXES or source.startswith(("/", ".", "~")):
        raise DataError(f"dataset file {path} does not exist; check the path, or give a Hugging Face dataset name")
    return _read_hf(source)


def _parse_json(text: str, origin: str) -> list[tuple[str, Any]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise DataError(
                f"{origin} line {exc.lineno}: not valid JSON ({exc.msg}, column {exc.colno}); "
                "fix the file (a JSON list of rows, or one JSON object a line)"
            ) from None
        return _parse_jsonl(text, origin)  # several top-level values: JSON lines under a .json name
    if isinstance(data, dict):
        return [("row 1", data)]
    if not isinstance(data, list):
        raise DataError(
            f"{origin} holds a JSON {type(data).__name__}, not a list of rows; give a JSON list of row objects"
        )
    return [(f"row {n}", row) for n, row in enumerate(data, 1)]


def _parse_jsonl(text: str, origin: str) -> list[tuple[str, Any]]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((f"line {n}", json.loads(line)))
        except json.JSONDecodeError as exc:
            raise DataError(
                f"{origin} line {n}: not valid JSON ({exc.msg}, column {exc.colno}); "
                "fix or remove that line (one JSON object a line)"
            ) from None
    return out


def _read_parquet(path: Path) -> list[tuple[str, Any]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several unrelated types for a bad file
        raise DataError(
            f"dataset {path} is not a readable parquet file ({exc.__class__.__name__}: {exc}); "
            "regenerate it or give a .jsonl file"
        ) from None
    return [(f"row {n}", row) for n, row in enumerate(table.to_pylist(), 1)]


def _read_hf(source: str) -> tuple[str, list[tuple[str, Any]]]:
    name, _, split = source.rpartition(":") if ":" in source else (source, "", "")
    split = split or "test"
    origin = f"Hugging Face dataset {name} (split {split})"
    try:
        import datasets

        # the hub client's own HF_HUB_ETAG_TIMEOUT / HF_HUB_DOWNLOAD_TIMEOUT bound each request
        ds = datasets.load_dataset(name, split=split)
    except Exception as exc:  # noqa: BLE001 - datasets wraps network, auth and naming errors in many types
        raise DataError(
            f"cannot load {origin}: {exc.__class__.__name__}: {str(exc)[:300]}; check the name and "
            "split (write name:split), network access to the hub, or give a local .jsonl file"
        ) from None
    return origin, [(f"row {n}", dict(row)) for n, row in enumerate(ds, 1)]


def _validate_row(raw: Any, where: str, origin: str) -> dict[str, Any]:
    """A copy of the row with FAIL_TO_PASS / PASS_TO_PASS as lists; any defect names the row and the field."""
    if not isinstance(raw, dict):
        raise DataError(f"{origin} {where}: a row must be a JSON object, got {type(raw).__name__}")
    iid = raw.get("instance_id")
    label = f"{origin} {where} (instance {iid if isinstance(iid, str) and iid else '?'})"

    def fail(field: str, problem: str, fix: str) -> DataError:
        return DataError(f"{label}: field {field} {problem}; {fix}")

    row = dict(raw)
    for name in STRING_FIELDS:
        value = row.get(name)
        if name not in row or value is None:
            raise fail(name, "is missing", "every SWE-bench row needs " + ", ".join(STRING_FIELDS + LIST_FIELDS))
        if not isinstance(value, str) or (
            name in ("instance_id", "repo", "base_commit", "problem_statement") and not value.strip()
        ):
            raise fail(
                name, f"must be a non-empty string, got {type(value).__name__} {str(value)[:40]!r}", "fix the row"
            )
    for name in LIST_FIELDS:
        if name not in row or row[name] is None:
            raise fail(name, "is missing", "give a JSON list of test names (a string or a list)")
        row[name] = _test_list(row[name], lambda p, f, n=name: fail(n, p, f))
    if not row["FAIL_TO_PASS"]:
        raise fail("FAIL_TO_PASS", "is empty", "an instance needs at least one test that the fix makes pass")
    for name in V5_FIELDS:
        value = row.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise fail(
                name,
                f"must be a non-empty string, got {type(value).__name__} {str(value)[:40]!r}",
                "fix the row or drop the column (swebench 5.x columns are optional)",
            )
    if row.get("eval_type") is not None and row["eval_type"] not in EVAL_TYPES:
        raise fail("eval_type", f"is {row['eval_type']!r}", f"use one of {', '.join(EVAL_TYPES)}")
    return row


def _test_list(value: Any, fail: Any) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise fail(
                f"is not valid JSON ({exc.msg} at column {exc.colno})",
                'write it as a JSON list of test names, e.g. ["tests/test_x.py::test_y"]',
            ) from None
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, str) for t in value):
        raise fail(
            f"must be a list of test-name strings, got {str(value)[:60]!r}",
            'write it as a JSON list of test names, e.g. ["tests/test_x.py::test_y"]',
        )
    return list(value)


# ------------------------------------------------------------------------------------------------
# the data source
# ------------------------------------------------------------------------------------------------


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
