"""Partial rollouts against the batch pipeline on heavy-tailed rollouts: the same run twice at MAX_STALENESS=1,
with PARTIAL_ROLLOUTS=false (the reference, measured in this run) and PARTIAL_ROLLOUTS=true, steps per hour of each.

Everything is real but the model's choices (``tests/partial_run.py``): the trainer under torchrun training SmolLM2
on CPU, the driver and proxy, Docker sandboxes, qwen-code and the grader on the embedded default's tasks. The
scripted model (``tests/scripted_vllm.py``, with vLLM's pause, reload and resume routes) draws each rollout's model
time from a seeded lognormal, capped, and spreads it over the rollout's calls: a few rollouts run many times longer
than the median. The reference's batch waits for its slowest rollout and its sync drains the calls in flight
(``/pause?mode=wait``); with partial rollouts a step trains on the first groups to complete and the sync freezes the
calls in flight (``mode=keep``). Both runs use the same settings, ROLLOUT_CONCURRENCY included; the partial run
adds OVER_SAMPLING (``--over-sampling``, default one step's groups), so its last steps, too, take the first groups
to complete. ``--median`` and ``--cap`` set how heavy the tail is: rollouts slower than a training step are where the
pool should gain. ``--trained-model`` sets what a training step costs: ``smollm2`` (the embedded default's policy:
8 samples train in 110-260 s on 2 cores with native bf16, about 450 s in fp32 on an AVX2-only CPU, longer than most
rollouts, so the step is training-bound) or ``tiny`` (a random 2-layer SmolLM2, ``tests/tiny_model.py``: a step
trains in seconds, so, as with a large model on GPUs where generation is most of a step, the rollouts bound it).

Steps per hour count the warm steps (every step after the first) over their summed ``time/step``. Target: >= 1.5x.

    .venv/bin/python -m benchmarks.bench_partial [--steps 4] [--batch 4] [--seed 0] [--median 12] [--sigma 1.5]
        [--cap 240] [--over-sampling BATCH] [--trained-model smollm2|tiny]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from qwen_swe.supervise import install as install_supervisor
from tests.partial_run import PlanScript, fixable_rows, jsonl, run_settings, run_trainer
from tests.scripted_vllm import VLLMThread
from tests.tiny_model import tiny_smollm2_dir

TARGET = 1.5


def run(out: Path, args: argparse.Namespace, partial: bool) -> dict:
    rng_args = (math.log(args.median), args.sigma, args.cap)
    script = PlanScript(fixable_rows(), seed=args.seed, seconds=lambda rng, iid, version: lognormal(rng, *rng_args))
    t0 = time.monotonic()
    with VLLMThread(script) as vllm:
        script.version = lambda: vllm.server.version
        settings = run_settings(
            out,
            vllm.url,
            run_id=f"qwen-swe-bench-partial{int(partial)}",
            num_rollouts=args.steps,
            rollout_batch_size=args.batch,
            n_samples=2,
            max_staleness=1,
            partial_rollouts=partial,
            over_sampling=args.over_sampling if partial else 0,  # within the credit: the concurrency below holds all
            rollout_concurrency=args.batch * 2 * 2,  # the pool's groups, all at once; the same for the reference
            boot_concurrency=4,
            agent_timeout=max(1800.0, 2 * args.cap + 600),  # the slowest rollout's model time, and its tools'
            save_interval=args.steps,
            **({"model": str(tiny_smollm2_dir())} if args.trained_model == "tiny" else {}),
        )
        proc = run_trainer(settings, timeout=run_timeout(args))
        syncs = list(vllm.server.syncs)
    if proc.returncode != 0:
        print(proc.stdout[-6000:], file=sys.stderr)
        raise SystemExit(f"PARTIAL_ROLLOUTS={partial}: the trainer failed ({proc.returncode}); see {out}/trainer.log")
    return {
        "steps": jsonl(out / "metrics.jsonl"),
        "plans": [p.seconds for p in script.plans],
        "syncs": syncs,
        "wall": time.monotonic() - t0,
    }


def run_timeout(args: argparse.Namespace) -> float:
    """Seconds one run may take: the reference waits for each batch's slowest rollout, up to ``--cap`` a step, and
    trains 110-260 s a step here; never less than the 2400 s the default distribution was measured with."""
    return max(2400.0, 600 + args.steps * (2 * args.cap + 400))


def lognormal(rng: random.Random, mu: float, sigma: float, cap: float) -> float:
    return min(cap, rng.lognormvariate(mu, sigma))


def report(name: str, result: dict) -> float:
    for s in result["steps"]:
        print(
            f"  {name} step {s['step']}: {s['time/step']:.1f}s = rollout wait {s['time/rollout']:.1f} + train "
            f"{s['time/train']:.1f} + sync {s['time/sync']:.1f} + save {s['time/save']:.1f} | samples {s['samples']} "
            f"zero-var groups {s['zero_variance_groups']} update {not s['skipped_update']} | staleness max "
            f"{s.get('async/staleness_max', 0):.0f} carried {s.get('async/carried_groups', 0):.0f} stale dropped "
            f"{s.get('dropped/stale', 0):.0f} (written off {s.get('async/written_off_groups', 0):.0f} groups)"
        )
    plans, syncs = result["plans"], result["syncs"]
    print(
        f"  {name}: {len(plans)} rollouts began, model seconds median {statistics.median(plans):.1f} mean "
        f"{statistics.mean(plans):.1f} max {max(plans):.1f}; {len(syncs)} syncs, pause answered after "
        f"{statistics.mean(x['pause_seconds'] for x in syncs) if syncs else 0:.1f}s on average "
        f"({', '.join(sorted({x['mode'] for x in syncs}))}); wall {result['wall']:.0f}s"
    )
    warm = result["steps"][1:]
    per_hour = 3600 * len(warm) / sum(s["time/step"] for s in warm)
    print(f"  {name}: {per_hour:.1f} steps per hour over {len(warm)} warm steps")
    return per_hour


def main() -> int:
    install_supervisor()  # a SIGTERM unwinds: run_trainer's finally stops the trainer and its containers
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=4, help="steps per run (at least 2: the first one is cold)")
    ap.add_argument("--batch", type=int, default=4, help="ROLLOUT_BATCH_SIZE (groups of 2)")
    ap.add_argument("--seed", type=int, default=0, help="the seed of the model-time draws")
    ap.add_argument(
        "--median", type=float, default=12.0, help="median model seconds of a rollout (raise it for a heavier tail)"
    )
    ap.add_argument("--sigma", type=float, default=1.5, help="sigma of the lognormal")
    ap.add_argument("--cap", type=float, default=240.0, help="no rollout's model time above this many seconds")
    ap.add_argument(
        "--over-sampling",
        type=int,
        default=None,
        help="OVER_SAMPLING of the partial run (the reference has none); default: --batch, one step's groups",
    )
    ap.add_argument(
        "--trained-model",
        choices=("smollm2", "tiny"),
        default="smollm2",
        help="the policy the trainer updates: the embedded default's SmolLM2 (training-bound on 2 cores) or a tiny "
        "random 2-layer SmolLM2 (a step trains in seconds: rollout-bound)",
    )
    args = ap.parse_args()
    if args.steps < 2:
        ap.error("--steps must be at least 2")
    if args.median <= 0 or args.cap <= 0:
        ap.error("--median and --cap must be above 0")
    if args.over_sampling is None:
        args.over_sampling = args.batch
    if args.over_sampling < 0:
        ap.error("--over-sampling must be at least 0")
    root = Path(tempfile.mkdtemp(prefix="bench_partial_"))
    print(
        f"command: {' '.join(sys.argv)} (output {root})\nmodel seconds per rollout: min({args.cap:g}, "
        f"lognormal(mu=ln {args.median:g}, sigma={args.sigma:g})), seed {args.seed}; {args.steps} steps of "
        f"{args.batch} groups of 2, MAX_STALENESS=1, ROLLOUT_CONCURRENCY={args.batch * 4}; the partial run with "
        f"OVER_SAMPLING={args.over_sampling}; trained model {args.trained_model}; each run's time limit "
        f"{run_timeout(args):.0f}s"
    )
    reference = report("PARTIAL_ROLLOUTS=false", run(root / "reference", args, partial=False))
    partial = report("PARTIAL_ROLLOUTS=true", run(root / "partial", args, partial=True))
    ratio = partial / reference
    print(
        f"steps per hour: partial {partial:.1f} / reference {reference:.1f} = {ratio:.2f}x; "
        f"target >= {TARGET}x: {'met' if ratio >= TARGET else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
