"""SWE-bench instances for a run: validated rows, optionally restricted to an instance list.

``load_instances`` turns a dataset (``rows.py``) into validated rows, so a bad row fails at start (naming the file,
the row and the field) instead of inside a rollout.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qwen_swe.data.rows import read_rows
from qwen_swe.errors import DataError

STRING_FIELDS = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch", "version")
LIST_FIELDS = ("FAIL_TO_PASS", "PASS_TO_PASS")
V5_FIELDS = ("image", "eval_script", "log_parser", "eval_type")  # swebench 5.x carries these per row
EVAL_TYPES = ("pass_and_fail", "fail_only")


def load_instances(
    source: str | os.PathLike[str], instance_list: str | os.PathLike[str] | Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Validated rows from ``source`` (HF ``name[:split]``, a HF dataset folder, or a local file), in order,
    optionally restricted to the ids in ``instance_list`` (a file of ids, one a line, or a list of ids)."""
    origin, located = read_rows(str(source))
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
