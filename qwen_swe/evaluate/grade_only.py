"""Grade an existing predictions file (from this project or any other agent) with the project's grader, as the
harness's ``run_evaluation`` does: a fresh container per attempt, the official parsers, the binary verdict.

Results are appended to ``results.jsonl`` as each attempt finishes, so a re-run with the same output folder grades
only what is missing.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from qwen_swe.config.settings import Settings
from qwen_swe.evaluate.predictions import Prediction
from qwen_swe.evaluate.report import EMPTY, ERROR, RESOLVED, UNRESOLVED, AttemptResult
from qwen_swe.progress import Meter, show
from qwen_swe.reward.harness import grade_async

RESULTS = "results.jsonl"


def append_line(path: Path, row: dict[str, Any]) -> None:
    """One JSON line, appended as soon as an attempt ends, so a re-run resumes after it."""
    with path.open("a") as fh:
        fh.write(json.dumps(row) + "\n")


def load_done(out: Path) -> dict[tuple[str, int], AttemptResult]:
    path = out / RESULTS
    if not path.is_file():
        return {}
    done = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = AttemptResult(**json.loads(line))
            done[(r.instance_id, r.attempt)] = r
    return done


async def grade_one(p: Prediction, row: dict[str, Any], settings: Settings, out: Path) -> AttemptResult:
    """The outcome of one attempt: empty, resolved, unresolved, or an infrastructure error (never unresolved)."""
    if not p.model_patch.strip():
        return AttemptResult(p.instance_id, p.attempt, EMPTY, "empty patch")
    t0 = time.monotonic()
    grade = await grade_async(
        row,
        p.model_patch,
        reward=settings.reward,
        sandbox=settings.sandbox,
        mode="binary",
        run_id=settings.label,
        log_dir=out / "grades",
    )
    outcome = ERROR if grade.aborted else RESOLVED if grade.resolved else UNRESOLVED
    return AttemptResult(p.instance_id, p.attempt, outcome, grade.reason, round(time.monotonic() - t0, 3))


async def grade_predictions(
    predictions: list[Prediction], rows: dict[str, dict[str, Any]], settings: Settings, out: Path, concurrency: int
) -> list[AttemptResult]:
    """Grade every prediction of a known instance not graded before; return all results (old and new)."""
    out.mkdir(parents=True, exist_ok=True)
    done = load_done(out)
    bound = asyncio.Semaphore(max(1, concurrency))
    todo = [p for p in predictions if p.instance_id in rows and (p.instance_id, p.attempt) not in done]
    meter = Meter(total=len(todo), tallies=dict.fromkeys((RESOLVED, UNRESOLVED, EMPTY, ERROR), 0))

    async def one(p: Prediction) -> None:
        async with bound:
            result = await grade_one(p, rows[p.instance_id], settings, out)
        append_line(out / RESULTS, asdict(result))
        done[(p.instance_id, p.attempt)] = result
        meter.advance(**{result.outcome: 1})

    with show(meter, "grading", unit="attempts"):
        await asyncio.gather(*(one(p) for p in todo))
    return list(done.values())
