"""Collect expert demonstrations: the expert (``expert.py``) through the real agent, proxy and grader.

Every task gets one rollout from the expert (and, with ``recover``, some a second one that stumbles and recovers); a
rollout the grader resolves becomes a demonstration (rejection sampling, as SWE-smith's trajectories are filtered),
any other is counted and left out. Only the rows given are used: pass the *train* split, never the held-out one.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

from qwen_swe.config.settings import Settings
from qwen_swe.data.prompts import build_prompt
from qwen_swe.data.sample import Sample, Status, run_of
from qwen_swe.rollout.engine import RolloutEngine
from qwen_swe.rollout.progress import BatchStats, live_progress
from qwen_swe.warmstart.demos import demo_line, mask_out
from qwen_swe.warmstart.expert import ExpertServer, one_line_fix, stumble_for

DEMOS = "demos.jsonl"


def usable(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Rows the expert can play: a one-line gold patch, one row per problem statement. Rows that share a statement
    and a fix are one demonstration; a statement with two different fixes is ambiguous, and all its rows are left out.
    """
    fixes: dict[str, set] = {}
    for row in rows:
        fixes.setdefault(row["problem_statement"].strip(), set()).add(one_line_fix(row.get("patch", "")))
    keep, seen = [], set()
    for row in rows:
        statement = row["problem_statement"].strip()
        if None not in fixes[statement] and len(fixes[statement]) == 1 and statement not in seen:
            keep.append(row)
            seen.add(statement)
    return keep, len(rows) - len(keep)


async def _play(expert: ExpertServer, rows: list[dict[str, Any]], settings: Settings, label: str) -> list[Sample]:
    """One expert rollout per row through the real agent, proxy and grader."""
    engine = RolloutEngine(settings, upstream=await expert.start(), model=settings.model_name, served_model="expert")
    samples = [
        Sample(group_index=i, index=0, prompt=build_prompt(row), metadata=dict(row)) for i, row in enumerate(rows)
    ]
    try:
        await engine.start()
        stats = BatchStats(groups=len(samples), planned=len(samples))
        with live_progress(stats, label):
            await asyncio.gather(*(engine.run_sample(s, stats) for s in samples))
    finally:
        await engine.stop()
        await expert.stop()
    return samples


async def collect(rows: list[dict[str, Any]], settings: Settings, out: Path, recover: float = 0.0) -> dict[str, Any]:
    """Run the expert on ``rows``; write ``out/demos.jsonl`` (resolved rollouts) and return the counts.
    ``recover``: the fraction of tasks that get a second demonstration, one that recovers from a stumble
    (``expert.py``); every task keeps its straight one, so the straight path is taught as often as without them."""
    from transformers import AutoTokenizer  # late: heavy

    rows, skipped = usable(rows)
    tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, settings.model_name)
    expert = ExpertServer(rows, tokenizer)
    straight = await _play(expert, rows, settings, "demonstrations")
    stumbler = ExpertServer(rows, tokenizer, recover=recover)
    stumbling = [row for row in rows if stumble_for(row["problem_statement"], recover) is not None]
    stumbled = await _play(stumbler, stumbling, settings, "demonstrations that recover") if stumbling else []
    samples = straight + stumbled
    out.mkdir(parents=True, exist_ok=True)
    resolved = [s for s in samples if s.status != Status.ABORTED and run_of(s).resolved]
    stumbles: Counter[str] = Counter()
    second = {id(s) for s in stumbled}
    with (out / DEMOS).open("w") as f:
        for sample in resolved:
            stumble, span = stumbler.mistake_ids(sample.metadata) if id(sample) in second else (None, [])
            if stumble is not None:
                sample.loss_mask = mask_out(list(sample.tokens), sample.response_length, list(sample.loss_mask), span)
                stumbles[stumble] += 1
            f.write(json.dumps(demo_line(sample, stumble)) + "\n")
    dropped = drops(samples)
    report = {
        "tasks": len(rows),
        "skipped": skipped,
        "attempts": len(samples),
        "demonstrations": len(resolved),
        "dropped": len(dropped),
        "drop_reasons": dict(Counter(d["reason"] for d in dropped)),
        "drops": dropped,
        "unresolved": sum(s.status != Status.ABORTED and not run_of(s).resolved for s in samples),
        "tokens": sum(len(s.tokens) for s in resolved),
        "trained_tokens": sum(sum(s.loss_mask or []) for s in resolved),
        "recover": recover,
        "stumbles": dict(stumbles),
        "gave_up": expert.gave_up + stumbler.gave_up,
    }
    (out / "demos_report.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def drops(samples: list[Sample]) -> list[dict[str, str]]:
    """The rollouts an infrastructure failure dropped, each with its task, reason and detail, so none is lost."""
    return [
        {
            "instance_id": str(s.metadata.get("instance_id")),
            "reason": str(run_of(s).drop_reason),
            "detail": str(run_of(s).drop_detail or "")[:500],
        }
        for s in samples
        if s.status == Status.ABORTED
    ]
