"""Evaluation with the agent: ``EVAL_SAMPLES`` attempts per instance through the same sandbox, agent, proxy and
grader as training (the rollout engine), no trainer. Each finished attempt is appended to ``predictions.jsonl``
(the official format) and ``results.jsonl`` at once, so a re-run with the same folder runs only what is missing;
its whole rollout (conversation, patch, grade, timings) goes to ``rollouts.jsonl``, as a training step's do.
An infrastructure failure is an ``error`` attempt with its reason, never ``unresolved``."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from pathlib import Path
from typing import Any

from qwen_swe.config.settings import Settings
from qwen_swe.data.prompts import build_prompt
from qwen_swe.data.sample import Sample, Status, run_of, stamp
from qwen_swe.evaluate.grade_only import RESULTS, append_line, load_done
from qwen_swe.evaluate.report import EMPTY, ERROR, RESOLVED, UNRESOLVED, AttemptResult
from qwen_swe.rollout.contract import RolloutRunner
from qwen_swe.rollout.engine import RolloutEngine
from qwen_swe.rollout.progress import BatchStats, live_progress
from qwen_swe.rollout.record import dump_rollouts
from qwen_swe.traffic.sessions import derive_seed

PREDICTIONS = "predictions.jsonl"
ROLLOUTS = "rollouts.jsonl"


def outcome_of(sample: Sample) -> AttemptResult:
    meta = sample.metadata
    attempt = int(sample.index or 0)
    if sample.status == Status.ABORTED:
        reason = f"{meta.get('drop_reason')}: {meta.get('drop_detail')}"
        return AttemptResult(meta["instance_id"], attempt, ERROR, reason, float(meta.get("agent_seconds") or 0.0))
    seconds = float(meta.get("agent_seconds") or 0.0) + float(meta.get("grade_seconds") or 0.0)
    kind = RESOLVED if meta.get("resolved") else EMPTY if not (meta.get("patch") or "").strip() else UNRESOLVED
    return AttemptResult(
        meta["instance_id"], attempt, kind, None if kind == RESOLVED else meta.get("outcome"), round(seconds, 3)
    )


def missing(
    rows: list[dict[str, Any]], eval_samples: int, done: dict[tuple[str, int], AttemptResult]
) -> list[tuple[int, dict[str, Any], int]]:
    """(group, row, attempt) of every attempt ``done`` does not record yet: what a re-run still has to run."""
    return [
        (g, row, k) for g, row in enumerate(rows) for k in range(eval_samples) if (row["instance_id"], k) not in done
    ]


async def run_attempts(
    rows: list[dict[str, Any]],
    settings: Settings,
    out: Path,
    engine: RolloutRunner | None = None,
    label: str = "evaluation",
) -> list[AttemptResult]:
    """Run the missing attempts (``settings.eval_samples`` per row) and return every result, old and new.

    ``engine``: a running engine to share (the trainer's, for periodic evaluation); else one is started here.
    Only the verdict is read, so the engine's reward mode does not matter. ``label`` names the progress display.
    """
    if engine is not None:
        return await _attempts(engine, rows, settings, out, label)
    assert settings.inference.url is not None  # the run started or was given its server
    engine = RolloutEngine(
        settings,
        upstream=settings.inference.url,
        model=settings.model_name,
        served_model=settings.inference.served_model_name,
    )
    await engine.start()
    try:
        return await _attempts(engine, rows, settings, out, label)
    finally:
        await engine.stop()


async def _attempts(
    engine: RolloutRunner, rows: list[dict[str, Any]], settings: Settings, out: Path, label: str
) -> list[AttemptResult]:
    out.mkdir(parents=True, exist_ok=True)
    done = load_done(out)
    # common random numbers: attempt k of a task samples with the same seeds in every evaluation of a run's SEED, so
    # two checkpoints sample alike wherever their policies agree and a paired comparison sees the policy's change
    samples = [
        stamp(
            Sample(group_index=g, index=k, prompt=build_prompt(row), metadata=dict(row)),
            attempt_seed=derive_seed(settings.seed, row["instance_id"], k),
        )
        for g, row, k in missing(rows, settings.eval_samples, done)
    ]
    stats = BatchStats(groups=len({x.group_index for x in samples}), planned=len(samples))

    async def one(sample: Sample) -> None:
        await engine.run_sample(sample, stats)
        result = outcome_of(sample)
        append_line(
            out / PREDICTIONS,
            {
                "instance_id": result.instance_id,
                "model_name_or_path": settings.model_name,
                "model_patch": run_of(sample).patch or "",
            },
        )
        append_line(out / RESULTS, asdict(result))
        dump_rollouts(out / ROLLOUTS, [[sample]], [])
        done[(result.instance_id, result.attempt)] = result

    with live_progress(stats, label):
        await asyncio.gather(*(one(s) for s in samples))
    return list(done.values())
