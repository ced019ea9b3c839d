"""JSON-lines files the project writes and reads back (demonstrations, saved rollouts): one object a line, each
with the fields its reader needs, and a bad line named by file and number."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from qwen_swe.errors import DataError


def read_records(lines: Iterable[str], where: Path, fields: Sequence[str], fix: str) -> Iterator[dict[str, Any]]:
    """The objects of ``lines`` (blank ones skipped); a line that is not JSON or lacks one of ``fields`` raises
    ``DataError`` naming ``where``, the line number and ``fix``."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise DataError(f"{where}:{number} is not JSON ({exc})") from None
        missing = [f for f in fields if f not in row]
        if missing:
            raise DataError(f"{where}:{number} lacks {', '.join(missing)}; {fix}")
        yield row
