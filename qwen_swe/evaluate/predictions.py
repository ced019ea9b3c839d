"""SWE-bench predictions files: one JSON object a line with ``instance_id``, ``model_name_or_path`` and
``model_patch`` (the official format; several lines may share an instance: one per attempt)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from qwen_swe.errors import DataError

FIELDS = ("instance_id", "model_name_or_path", "model_patch")


@dataclass(frozen=True)
class Prediction:
    instance_id: str
    model_name_or_path: str
    model_patch: str
    attempt: int = 0  # 0, 1, ... in file order among the lines of the same instance
    line: int = 0


def read_predictions(path: str | Path) -> tuple[list[Prediction], list[str]]:
    """The valid predictions and one error per bad line (naming the line and the field); nothing else stops."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise DataError(f"cannot read predictions file {path} ({exc}); give a JSONL file of predictions") from None
    out: list[Prediction] = []
    errors: list[str] = []
    attempts: dict[str, int] = {}
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            errors.append(f"{path}:{number}: not JSON ({exc.msg} at column {exc.colno})")
            continue
        problem = _problem(row)
        if problem:
            errors.append(f"{path}:{number}: {problem}")
            continue
        iid = row["instance_id"]
        out.append(Prediction(iid, row["model_name_or_path"], row["model_patch"] or "", attempts.get(iid, 0), number))
        attempts[iid] = attempts.get(iid, 0) + 1
    return out, errors


def _problem(row: object) -> str | None:
    if not isinstance(row, dict):
        return f"a prediction must be a JSON object, got {type(row).__name__}"
    for name in FIELDS:
        if name not in row:
            return f"field {name!r} is missing"
        if name == "model_patch" and row[name] is None:
            continue  # an empty prediction, as the harness allows
        if not isinstance(row[name], str) or (name != "model_patch" and not row[name].strip()):
            return f"field {name!r} must be a non-empty string, got {row[name]!r:.60}"
    return None
