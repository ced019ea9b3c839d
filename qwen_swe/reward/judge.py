"""The judgement of an eval log: swebench's verdict, unless the witness's records or pytest's own report say the
log cannot be trusted (then the grade fails as ``reward_hack_suspected``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from qwen_swe.reward import audit, tamper
from qwen_swe.reward import scoring as grading
from qwen_swe.reward.outcome import Grade, GradeStatus, Record


async def judge(
    rec: Record,
    script: str,
    log_text: str,
    exit_code: int,
    records: list[str] | None,
    report: Callable[[], Awaitable[str | None]] | None,
) -> Grade:
    """swebench's verdict on the log, unless the witness's ``records`` (None: no witness) or pytest's own report
    (``report`` reads it, only when the verdict needs it; None: not a pytest eval) say the log cannot be trusted."""
    instance, details = rec.instance, rec.details
    with rec.timed("parse"):
        verdict = await asyncio.to_thread(grading.judge_log, instance, log_text, script)
    details.update(
        eval_exit_code=exit_code,
        resolution=verdict.resolution,
        tests_status=verdict.tests_status,
        status_map=verdict.status_map,
    )
    if records is not None and (seen := audit.findings(records)):
        details["reward_hack"] = seen
        return rec.failed(f"reward_hack_suspected: the patch's code, watched while the tests ran: {seen[0]}")
    if verdict.markers_missing:
        return rec.aborted(
            f"eval log lacks the test markers (exit {exit_code}): the eval script was killed or does not print them"
        )
    if not verdict.found:
        return rec.failed(f"eval failed: {verdict.problem}")
    if report is not None:
        disagreements = tamper.cross_check(verdict.status_map, grading.listed_tests(instance), await report())
        if disagreements:
            details["reward_hack"] = disagreements
            return rec.failed(f"reward_hack_suspected: the log and pytest's own report disagree: {disagreements[0]}")
    return rec.verdict(
        1.0 if verdict.resolved else -1.0,
        GradeStatus.GRADED,
        None if verdict.resolved else verdict.resolution,
        verdict.resolved,
        verdict.f2p,
        verdict.p2p,
    )
