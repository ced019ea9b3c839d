"""Off-policy rollouts against the synchronous loop on the embedded default: the same `run_grpo.sh` run twice, with
MAX_STALENESS=0 (the reference, measured in this run) and MAX_STALENESS=1, the warm step time of each compared.

A warm step is any step after the first: the first has nothing in flight to overlap with. The step time is the
trainer's ``time/step`` (waiting for the batch, training, sync, checkpoint). Target: async <= 0.7x sync.

    .venv/bin/python -m benchmarks.bench_async [--steps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from qwen_swe.paths import REPO_ROOT

TARGET_RATIO = 0.7


def run(out: Path, steps: int, staleness: int) -> tuple[float, list[dict]]:
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_URL", "MODEL", "DATASET")}
    env.update(
        OUTPUT_DIR=str(out),
        NUM_ROLLOUTS=str(steps),
        MAX_STALENESS=str(staleness),
        RUN_ID=f"qwen-swe-bench-async{staleness}",
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        ["bash", "examples/qwen_swe/run_grpo.sh"], cwd=REPO_ROOT, env=env, text=True, capture_output=True, timeout=3600
    )
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"MAX_STALENESS={staleness}: run_grpo.sh failed ({proc.returncode})")
    return wall, [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def report(name: str, wall: float, steps: list[dict]) -> float:
    for s in steps:
        print(
            f"  {name} step {s['step']}: step {s['time/step']:.1f}s = rollout wait {s['time/rollout']:.1f} + train "
            f"{s['time/train']:.1f} + sync {s['time/sync']:.1f} + save {s['time/save']:.1f} | batch generated in "
            f"{s.get('async/rollout_seconds', s['time/rollout']):.1f}s, {s.get('time/overlap', 0.0):.1f}s of it "
            f"behind training | staleness max {s.get('async/staleness_max', 0):.0f} | samples {s['samples']} "
            f"dropped {s['dropped_samples']:.0f} zero-var {s['zero_variance_groups']}"
        )
    warm = [s["time/step"] for s in steps[1:]]
    mean = sum(warm) / len(warm)
    print(f"  {name}: wall {wall:.1f}s, warm step mean {mean:.1f}s over {len(warm)} steps")
    return mean


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3, help="steps per run (at least 2: the first one is cold)")
    args = ap.parse_args()
    if args.steps < 2:
        ap.error("--steps must be at least 2")
    root = Path(tempfile.mkdtemp(prefix="bench_async_"))
    print(f"command: {' '.join(sys.argv)}  (steps={args.steps}, output {root})")
    sync = report("MAX_STALENESS=0", *run(root / "sync", args.steps, 0))
    off = report("MAX_STALENESS=1", *run(root / "async", args.steps, 1))
    ratio = off / sync
    print(
        f"warm step time: async {off:.1f}s / sync {sync:.1f}s (reference) = {ratio:.2f}x; "
        f"target <= {TARGET_RATIO}x: {'met' if ratio <= TARGET_RATIO else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
