"""The local task pack for integration tests: a missing pack or image skips locally and fails under CI."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from qwen_swe.data.taskpack import TASKS_JSONL
from qwen_swe.errors import TaskPackError

BUILD_HINT = "build them with `.venv/bin/python -m qwen_swe.data.taskpack build`"


def missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must provide the local task pack: {reason}")
    pytest.skip(reason)


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


def require_images(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows``, once every row's image is built (else skipped locally, failed under CI)."""
    import docker

    client = docker.from_env(timeout=60)
    try:
        absent = [r["image"] for r in rows if not client.images.list(name=r["image"])]
    finally:
        client.close()
    if absent:
        missing(f"task images missing ({', '.join(absent)}); {BUILD_HINT}")
    return rows


def gold_edit(patch: str) -> tuple[str, str, str] | None:
    """(path, old line, new line) of the gold patch's first single-line replacement in a non-test file."""
    path = None
    lines = patch.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("+++ b/"):
            path = line[6:]
        elif (
            path
            and not path.startswith("tests/")
            and line.startswith("-")
            and not line.startswith("---")
            and i + 1 < len(lines)
            and lines[i + 1].startswith("+")
            and not lines[i + 1].startswith("+++")
            and (i + 2 >= len(lines) or not lines[i + 2].startswith(("+", "-")))
            and line[1:].strip()
        ):
            return path, line[1:], lines[i + 1][1:]
    return None


def replayable_task() -> dict[str, Any]:
    """A task row of the local pack whose image is built, with a one-line gold change to replay."""
    import docker

    from qwen_swe.paths import TASK_PACK

    if not TASK_PACK.is_file():
        missing(f"no task pack at {TASK_PACK}; {BUILD_HINT}")
    client = docker.from_env(timeout=60)
    try:
        for line in TASK_PACK.read_text().splitlines():
            row = json.loads(line)
            if client.images.list(name=row["image"]) and gold_edit(row.get("patch", "")):
                return row
    finally:
        client.close()
    missing(f"no task image of {TASK_PACK} is built; {BUILD_HINT}")
    raise AssertionError("unreachable")
