"""What the red-team tests share: the local pack's rows, a patch that appends a trick to the task package's
``__init__.py``, and grading many patches at once through the real grader."""

from __future__ import annotations

import asyncio
import difflib
import json

from qwen_swe.paths import TASK_PACK
from qwen_swe.reward.harness import Grade, grade_async
from qwen_swe.reward.settings import RewardSettings
from qwen_swe.sandbox.settings import SandboxSettings

PACK = [json.loads(line) for line in TASK_PACK.read_text().splitlines()]
PARALLEL = 3  # grades at once: container starts overlap, the CPU stays shared


def append_diff(path: str, base: str, extra: str) -> str:
    """A unified diff that appends ``extra`` to ``path`` (whose text is ``base``)."""
    lines = difflib.unified_diff(base.splitlines(True), (base + extra).splitlines(True), f"a/{path}", f"b/{path}")
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


def package_init(row: dict) -> tuple[str, str]:
    """(path, text at the base commit) of the task's package ``__init__.py``: where an import-time trick goes."""
    name = row["repo"].split("/")[-1]
    return f"{name}/__init__.py", (TASK_PACK.parent / "repos" / name / name / "__init__.py").read_text()


def grade_all(rows: list[dict], patches: list[str], tmp_path, run_id: str) -> list[Grade]:
    """Each row graded with its patch, ``PARALLEL`` at a time."""

    async def run() -> list[Grade]:
        limit = asyncio.Semaphore(PARALLEL)

        async def one(row: dict, patch: str) -> Grade:
            async with limit:
                return await grade_async(
                    row,
                    patch,
                    reward=RewardSettings(eval_timeout=300.0),
                    sandbox=SandboxSettings(image_namespace=""),
                    run_id=run_id,
                    log_dir=tmp_path,
                )

        return await asyncio.gather(*(one(r, p) for r, p in zip(rows, patches)))

    return asyncio.run(run())
