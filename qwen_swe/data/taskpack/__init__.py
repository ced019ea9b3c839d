"""The project's own task pack: small SWE-bench-format tasks over tiny repositories shipped in this folder.

The embedded default trains on these when no SWE-bench dataset is given. Sources live in ``src/<instance_id>/``
and ``repos/<name>/``; ``python -m qwen_swe.data.taskpack generate`` turns them into ``tasks.jsonl``,
``build`` makes one Docker image per task without Docker Hub, ``check`` proves every task in containers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from qwen_swe.errors import TaskPackError

PACK_DIR = Path(__file__).resolve().parent
TASKS_JSONL = PACK_DIR / "tasks.jsonl"
SRC_DIR = PACK_DIR / "src"
REPOS_DIR = PACK_DIR / "repos"


def pack_task(instance_id: str | None = None) -> dict[str, Any]:
    """A row of the task pack by its instance id (default: the first); a missing pack or id is a clear error."""
    if not TASKS_JSONL.is_file():
        raise TaskPackError(f"no task pack at {TASKS_JSONL}; build it with `python -m qwen_swe.data.taskpack build`")
    rows = [json.loads(line) for line in TASKS_JSONL.read_text().splitlines() if line.strip()]
    row = next((r for r in rows if r["instance_id"] == instance_id), None) if instance_id else rows[0]
    if row is None:
        ids = ", ".join(r["instance_id"] for r in rows)
        raise TaskPackError(f"{instance_id} is not in {TASKS_JSONL}; its ids: {ids}")
    return row
