"""Does the embedded default's run update its policy? The chance, measured on the groups it draws.

The default run (no settings) draws the same groups every time: the data source's permutation is fixed by SEED.
So whether a run updates its policy depends only on sampling: a GRPO step updates when one of its groups holds both
outcomes (+1 and -1); with all rewards equal every advantage is 0. This benchmark takes the tasks the default draws
(``NUM_ROLLOUTS`` x ``ROLLOUT_BATCH_SIZE`` groups), attempts each ``--k`` times with the default's policy (the cached
warm start), agent profile, temperature and grader, through ``run_eval.sh``, with seeds no training rollout uses, and
estimates from each task's resolve rate ``p`` the chance that a run updates at least once:

    P(update) = 1 - prod over the drawn groups of (p^n + (1 - p)^n),   n = N_SAMPLES

Its interval samples every ``p`` from its Beta(1 + resolved, 1 + failed) posterior (seeded). Target: >= 0.95, an
update in 19 runs of 20 (issue 36). The ratio printed is the estimate over the target. As a check measured in the same
run, each task's attempts are cut into groups of ``n`` in attempt order, and the groups with both outcomes are
counted against what the model above expects of them.

It also prints what the attempts look like (issue 36: more than half take several turns, at least a quarter leave a
non-empty patch, some resolve).

    .venv/bin/python -m benchmarks.bench_default_updates [--k 8] [--seed 7] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.bench_learning import SharedServer, evaluate_phase, read_rows
from qwen_swe.config.profile import with_profile
from qwen_swe.config.settings import Settings
from qwen_swe.data.source import SWEBenchDataSource
from qwen_swe.paths import cache_home
from qwen_swe.supervise import install as install_supervisor
from qwen_swe.warmstart.stage import WarmStartSpec, ensure_warm_start

TARGET = 0.95
DRAWS = 20_000
EVAL_SEED_OFFSET = 2_000_003  # the attempts' derived seeds are apart from the learning benchmark's


def drawn_tasks(settings: Settings) -> list[str]:
    """The instance of every group the default run draws, in order (a task drawn twice counts twice)."""
    source = SWEBenchDataSource.from_settings(settings)
    return [
        group[0].metadata["instance_id"]
        for _ in range(settings.num_rollouts)
        for group in source.get_samples(settings.rollout_batch_size)
    ]


def no_update(p: float, n: int) -> float:
    """The chance that a group of ``n`` attempts at resolve rate ``p`` has one outcome only."""
    return p**n + (1 - p) ** n


def p_update(rates: list[float], n: int) -> float:
    out = 1.0
    for p in rates:
        out *= no_update(p, n)
    return 1 - out


def interval(resolved: list[int], k: int, n: int, seed: int) -> tuple[float, float]:
    """The 5th and 95th percentiles of P(update) with each task's rate drawn from its Beta posterior."""
    rng = random.Random(seed)
    draws = sorted(p_update([rng.betavariate(1 + r, 1 + k - r) for r in resolved], n) for _ in range(DRAWS))
    return draws[int(0.05 * DRAWS)], draws[int(0.95 * DRAWS)]


def mixed_groups(outcomes: list[bool], n: int) -> tuple[int, int]:
    """(groups with both outcomes, groups) when the attempts are cut into groups of ``n`` in order."""
    groups = [outcomes[i : i + n] for i in range(0, len(outcomes) - n + 1, n)]
    return sum(0 < sum(g) < n for g in groups), len(groups)


def attempt_shape(rollouts: list[dict[str, Any]]) -> dict[str, float]:
    """Of the attempts: the fractions with several model turns, with a non-empty patch, resolved."""
    rows = [r for r in rollouts if r.get("status") != "aborted"]
    turns = [
        sum(m.get("role") == "assistant" for m in (r.get("conversation") or {}).get("messages") or []) for r in rows
    ]
    n = max(len(rows), 1)
    return {
        "attempts": len(rows),
        "several_turns": sum(t > 1 for t in turns) / n,
        "non_empty_patch": sum(bool((r.get("patch") or "").strip()) for r in rows) / n,
        "resolved": sum(bool(r.get("resolved")) for r in rows) / n,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=8, help="attempts per drawn task")
    ap.add_argument("--seed", type=int, default=7, help="the attempts' seeds and the interval's draws")
    ap.add_argument("--work", type=Path, default=None, help="a folder to keep (default: a new temporary one)")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_default_updates_"))
    work.mkdir(parents=True, exist_ok=True)
    settings = Settings.build(**with_profile({}))
    n = settings.n_samples
    tasks = drawn_tasks(settings)
    print(
        f"bench_default_updates: seed {args.seed}, k {args.k}, work {work}; the default draws {len(tasks)} groups "
        f"of {n} (SEED {settings.seed}, temperature {settings.agent.temperature})",
        flush=True,
    )
    model = ensure_warm_start(WarmStartSpec(), cache_home())
    rows = {r["instance_id"]: r for r in read_rows(Path(settings.dataset_source))}
    eval_rows = work / "drawn_tasks.jsonl"
    eval_rows.write_text("".join(json.dumps(rows[i]) + "\n" for i in dict.fromkeys(tasks)))
    server = SharedServer(work)
    try:
        res = evaluate_phase(
            "attempts", model, eval_rows, args.k, work, args.seed + EVAL_SEED_OFFSET, settings.agent.temperature, server
        )
    finally:
        server.close()
    results = read_rows(work / "attempts" / "eval" / "results.jsonl")
    graded = [r for r in results if r["outcome"] != "error"]
    resolved = [res["per_task"].get(t, 0) for t in tasks]
    attempts = {t: sum(r["instance_id"] == t for r in graded) for t in tasks}
    rates = [resolved[i] / max(attempts[t], 1) for i, t in enumerate(tasks)]
    estimate = p_update(rates, n)
    low, high = interval(resolved, args.k, n, args.seed)
    observed = expected = 0.0
    groups = 0
    for t in dict.fromkeys(tasks):
        outcomes = [r["outcome"] == "resolved" for r in graded if r["instance_id"] == t]
        mixed, count = mixed_groups(outcomes, n)
        observed, groups = observed + mixed, groups + count
        expected += count * (1 - no_update(sum(outcomes) / max(len(outcomes), 1), n))
    shape = attempt_shape(read_rows(work / "attempts" / "eval" / "rollouts.jsonl"))
    for t, r, p in zip(tasks, resolved, rates, strict=True):
        print(
            f"  {t}: {r}/{attempts[t]} resolved, a group of {n} has both outcomes with chance {1 - no_update(p, n):.2f}"
        )
    print(
        f"attempts: {shape['attempts']} graded ({res['errors']} infrastructure errors); several turns "
        f"{shape['several_turns']:.0%}, a non-empty patch {shape['non_empty_patch']:.0%}, "
        f"resolved {shape['resolved']:.0%}"
    )
    print(f"check: {observed:.0f} of {groups} groups cut from the attempts had both outcomes; expected {expected:.1f}")
    verdict = "met" if low >= TARGET else "met on the estimate only" if estimate >= TARGET else "not met"
    print(
        f"P(a run updates at least once) = {estimate:.3f} (posterior 90% interval {low:.3f}, {high:.3f}); "
        f"ratio to the target {TARGET}: {estimate / TARGET:.3f}x -> {verdict}"
    )
    report = {
        "seed": args.seed,
        "k": args.k,
        "n_samples": n,
        "tasks": tasks,
        "resolved": resolved,
        "p_update": estimate,
        "interval_90": [low, high],
        "check": {"mixed_groups": observed, "groups": groups, "expected": expected},
        "shape": shape,
        "errors": res["errors"],
    }
    (work / "default_updates.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    install_supervisor()  # a SIGTERM unwinds: the evaluation running and its server are stopped
    raise SystemExit(main())
