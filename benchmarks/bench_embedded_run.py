"""The embedded default end to end after set-up: `run_grpo.sh` for 2 GRPO steps, with the time split per phase.

Reference measured in the same run: the rollout phase (the agents' and graders' own work). The ratio
wall / rollout says how much the rest of the loop (server start, trainer start, training, sync, checkpoints) adds.

    .venv/bin/python -m benchmarks.bench_embedded_run [--steps 2] [--run DIR]

It also prints what the rollouts did (the fractions that call a tool, edit, leave a patch, resolve) and the
fraction of steps whose update was not skipped. ``--run DIR`` reports on a finished run instead of starting one.
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

from benchmarks.bench_learning import rollout_fractions
from qwen_swe.paths import REPO_ROOT

TARGET_S = 15 * 60


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--run", type=Path, help="report on this finished run's OUTPUT_DIR instead of starting one")
    args = ap.parse_args()
    if args.run:
        return report_attempts(args.run)
    out = Path(tempfile.mkdtemp(prefix="bench_embedded_")) / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_URL", "MODEL", "DATASET")}
    env.update(OUTPUT_DIR=str(out), NUM_ROLLOUTS=str(args.steps), RUN_ID="qwen-swe-bench-e2e")
    t0 = time.monotonic()
    proc = subprocess.run(
        ["bash", "examples/qwen_swe/run_grpo.sh"],
        cwd=REPO_ROOT,
        env=env,
        text=True,
        capture_output=True,
        timeout=3 * TARGET_S,
    )
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-4000:], file=sys.stderr)
        return proc.returncode
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    phases = {k: sum(s.get(f"time/{k}", 0.0) for s in steps) for k in ("rollout", "train", "sync", "save")}
    rest = wall - sum(phases.values())
    print(f"command: {' '.join(sys.argv)}  (steps={args.steps}, output {out})")
    for s in steps:
        print(
            f"  step {s['step']}: rollout {s['time/rollout']:.1f}s train {s['time/train']:.1f}s "
            f"sync {s['time/sync']:.1f}s save {s['time/save']:.1f}s | reward {s['reward_mean']:+.3f} "
            f"samples {s['samples']} dropped {s['dropped_samples']:.0f} zero-var {s['zero_variance_groups']}"
        )
    rows = [json.loads(line) for f in sorted((out / "rollouts").iterdir()) for line in f.read_text().splitlines()]
    traj = [r["trajectory"] for r in rows if r.get("trajectory")]
    sampled = sum(t["sampled_tokens"] for t in traj)
    kept = sum(t["retained_sampled_tokens"] for t in traj)
    print(
        f"token-exact trajectories: {kept}/{sampled} sampled tokens kept "
        f"({kept / max(sampled, 1):.2%}) over {len(traj)} real qwen-code rollouts"
    )
    print(
        f"wall {wall:.1f}s = rollout {phases['rollout']:.1f} + train {phases['train']:.1f} + sync "
        f"{phases['sync']:.1f} + save {phases['save']:.1f} + start-up and shutdown {rest:.1f}"
    )
    print(
        f"ratio wall / rollout (reference) = {wall / max(phases['rollout'], 1e-9):.2f}x; "
        f"wall / 15-minute target = {wall / TARGET_S:.2f}"
    )
    return report_attempts(out)


def report_attempts(out: Path) -> int:
    """What the agent did in the run's rollouts, and how many steps updated the policy."""
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    f = rollout_fractions(out / "rollouts")
    updated = sum(not s.get("skipped_update", True) for s in steps)
    print(
        f"{f['rollouts']} rollouts: call a tool {f['tool_call']:.0%}, edit {f['edit_call']:.0%}, non-empty patch "
        f"{f['non_empty_patch']:.0%}, resolved {f['resolved']:.0%}; steps with an update {updated}/{len(steps)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
