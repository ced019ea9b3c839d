"""Prove every task in containers of its image, the way the grader will see it.

At ``base_commit`` the row's eval script must show every FAIL_TO_PASS test failing (or absent) and every
PASS_TO_PASS test passing; with the gold patch all of them pass and nothing else runs; a task's
``careless`` fix, when it has one, passes FAIL_TO_PASS but breaks PASS_TO_PASS. The log is parsed with
swebench's own pytest parser and judged with its own resolution rule, so a task that passes here is
graded the same way in a rollout.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qwen_swe.data.taskpack.source import careless_patch
from qwen_swe.errors import TaskPackError
from qwen_swe.progress import Meter, show
from qwen_swe.reward.harness import Grade, evaluate
from qwen_swe.sandbox.base import SandboxFactory
from qwen_swe.sandbox.settings import SandboxSettings

CHECK_RUN_ID = "qwen-swe-check"  # the container label; `reap` finds leftovers by it
EVAL_TIMEOUT = 300.0
PASSED = ("PASSED", "XFAIL")
SANDBOX = SandboxSettings(image_namespace="")  # task images are local


@dataclass
class TaskCheck:
    instance_id: str
    problems: list[str] = field(default_factory=list)
    runs: dict[str, dict[str, str]] = field(default_factory=dict)  # run name -> test -> status
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems


async def _statuses(
    row: dict[str, Any], patch: str, log_dir: Path, sandboxes: SandboxFactory | None
) -> tuple[dict[str, str], Grade]:
    """The grader's evaluation of ``patch`` (empty: the base commit): test statuses and the verdict."""
    grade = await evaluate(
        row,
        patch,
        sandbox=SANDBOX,
        eval_timeout=EVAL_TIMEOUT,
        run_id=CHECK_RUN_ID,
        log_dir=log_dir,
        sandboxes=sandboxes,
    )
    if grade.aborted:
        raise TaskPackError(f"the eval could not run: {grade.reason}")
    if patch and not grade.details.get("applied"):
        raise TaskPackError(f"the patch does not apply: see {grade.details.get('log_dir')}/apply.log")
    return dict(grade.details.get("status_map") or {}), grade


def _not_passing(tests: list[str], statuses: dict[str, str]) -> list[str]:
    return [f"{t} ({statuses.get(t, 'absent')})" for t in tests if statuses.get(t) not in PASSED]


async def check_task(row: dict[str, Any], log_dir: Path, sandboxes: SandboxFactory | None = None) -> TaskCheck:
    """All checks of one task; problems are collected, not raised, so one report covers the whole pack. The runs
    are the grader's, on ``sandboxes`` (default: the local task images in Docker)."""
    result = TaskCheck(row["instance_id"])
    start = time.monotonic()
    f2p, p2p = json.loads(row["FAIL_TO_PASS"]), json.loads(row["PASS_TO_PASS"])
    try:
        base, _ = await _statuses(row, "", log_dir, sandboxes)
        result.runs["base"] = base
        _check_base(result, base, f2p, p2p)
        gold, verdict = await _statuses(row, row["patch"], log_dir, sandboxes)
        result.runs["gold"] = gold
        _check_gold(result, gold, verdict, f2p, p2p)
        careless = careless_patch(row["instance_id"])
        if careless is not None:
            sloppy, verdict = await _statuses(row, careless, log_dir, sandboxes)
            result.runs["careless"] = sloppy
            _check_careless(result, sloppy, verdict, f2p, p2p)
    except TaskPackError as exc:
        result.problems.append(str(exc))
    result.seconds = time.monotonic() - start
    return result


def _check_base(result: TaskCheck, base: dict[str, str], f2p: list[str], p2p: list[str]) -> None:
    passing_f2p = [t for t in f2p if base.get(t) in PASSED]
    if passing_f2p:
        result.problems.append(f"at base_commit these FAIL_TO_PASS tests already pass: {', '.join(passing_f2p)}")
    broken = _not_passing(p2p, base)
    if broken:
        result.problems.append(f"at base_commit these PASS_TO_PASS tests do not pass: {', '.join(broken)}")


def _check_gold(result: TaskCheck, gold: dict[str, str], verdict: Grade, f2p: list[str], p2p: list[str]) -> None:
    broken = _not_passing(f2p + p2p, gold)
    if broken:
        result.problems.append(f"with the gold patch these tests do not pass: {', '.join(broken)}")
    unlisted = sorted(set(gold) - set(f2p) - set(p2p))
    if unlisted:
        result.problems.append(
            f"the eval script runs tests listed in neither FAIL_TO_PASS nor PASS_TO_PASS: {', '.join(unlisted)}"
        )
    if not verdict.resolved:
        result.problems.append("swebench does not grade the gold patch as RESOLVED_FULL")


def _check_careless(result: TaskCheck, sloppy: dict[str, str], verdict: Grade, f2p: list[str], p2p: list[str]) -> None:
    if _not_passing(f2p, sloppy):
        result.problems.append(
            f"the careless fix should pass FAIL_TO_PASS but does not: {', '.join(_not_passing(f2p, sloppy))}"
        )
    if not _not_passing(p2p, sloppy):
        result.problems.append("the careless fix should break a PASS_TO_PASS test but breaks none")
    if verdict.resolved:
        result.problems.append("swebench grades the careless fix as resolved")


def check_all(
    rows: list[dict[str, Any]], jobs: int = 2, log: Callable[[str], None] = print, log_dir: Path | None = None
) -> list[TaskCheck]:
    """Check every row (``jobs`` tasks at a time); results come back in row order."""
    log_dir = log_dir or Path(tempfile.gettempdir()) / "qwen_swe_check"

    meter = Meter(total=len(rows), tallies={"ok": 0, "failed": 0})

    async def run() -> list[TaskCheck]:
        bound = asyncio.Semaphore(max(1, jobs))

        async def one(row: dict[str, Any]) -> TaskCheck:
            async with bound:
                result = await check_task(row, log_dir)
            meter.advance(**{"ok" if result.ok else "failed": 1})
            log(f"{'ok' if result.ok else 'FAILED':>6}  {result.seconds:5.1f} s  {result.instance_id}")
            return result

        with show(meter, "checking tasks", unit="tasks"):
            return list(await asyncio.gather(*(one(row) for row in rows)))

    return asyncio.run(run())


def format_report(results: list[TaskCheck]) -> str:
    lines = []
    for result in results:
        runs = ", ".join(
            f"{name}: {sum(s in PASSED for s in statuses.values())}/{len(statuses)} pass"
            for name, statuses in result.runs.items()
        )
        lines.append(f"{'ok' if result.ok else 'FAILED':>6}  {result.instance_id}  ({runs})")
        lines.extend(f"        - {problem}" for problem in result.problems)
    failed = sum(not r.ok for r in results)
    lines.append(f"{len(results) - failed}/{len(results)} tasks pass the check")
    return "\n".join(lines)
