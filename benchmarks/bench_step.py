"""How close a GRPO step comes to what its model allows: each warm step's wall time against its critical path.

Run: .venv/bin/python -m benchmarks.bench_step [--steps 3] [--warmup 1] [--run DIR] [--keep]

It runs the embedded default (``examples/qwen_swe/run_grpo.sh``, ``NUM_ROLLOUTS=--steps``) in a fresh OUTPUT_DIR
under a temporary folder, in its own process group, and reads back what the run recorded: the trainer's phases per
step (``phases`` and ``time/*`` in ``metrics.jsonl``) and every rollout's timeline (``rollouts/step_N.jsonl``, the
format of ``qwen_swe/rollout/timeline.py``). ``--run DIR`` reports on a finished run's OUTPUT_DIR instead.

Per step, with the figures in seconds:

* wall ``W``: the trainer's step (``time/step``: its rollout phase, then swap, train, save, sync);
* the critical path ``C = M + T_exposed``. ``M`` is the largest, over the step's rollouts, of one rollout's summed
  model-call spans: one agent's calls run one after another, so no scheduling can make the step shorter than its
  longest chain of them. ``T_exposed`` is the part of the trainer's swap, train, save and sync phases that no
  rollout's interval (any step's: origin to origin + seconds) overlaps; at ``MAX_STALENESS=0`` nothing overlaps
  them and it is their sum;
* the ratio ``W / C`` (target <= 1.25);
* the overhead ``W - C``, split exactly by kind: the spans other than ``model`` of the critical rollout (the one
  whose model time is ``M``; boot, agent_start, tool, grade, ...; ``other`` is its time under no span), its wait
  before it started (``queued``: the rollout phase's start to its start, its slot of ``ROLLOUT_CONCURRENCY`` taken
  by earlier rollouts), the tail wait (its end to the rollout phase's end: rollouts in later slots or slower than
  it, the batch collected), the trainer's overlapped time (in ``W``, not in ``C``), and the time between phases;
* the mean rollout's seconds by kind (the step's ``share/<kind>`` from ``summarize`` times the mean rollout time)
  and the tail (slowest rollout / median), which say where the time of every rollout went, not only the critical one.

Step 0 also carries the run's cold costs (the first container of each image, the first compile of the server's
shapes); the first ``--warmup`` steps are printed but left out of the warm figure. The server's and trainer's
start-up and the shutdown, outside every step, are printed apart: the process's wall minus the steps' walls.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwen_swe.paths import REPO_ROOT
from qwen_swe.rollout.timeline import MODEL, OTHER, Span, summarize, union_seconds

TARGET = 1.25
TRAINER_PHASES = ("swap", "train", "save", "sync")
QUEUED, TAIL, OVERLAPPED, BETWEEN = "queued", "tail wait", "trainer overlapped", "between phases"
STOP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class StepFigures:
    step: int
    wall: float
    rollout_phase: float
    trainer: dict[str, float]  # seconds per trainer phase (swap, train, save, sync)
    trainer_exposed: float
    model: float  # M: the critical rollout's summed model-call seconds
    overhead: dict[str, float]  # W - C by kind; sums to wall - critical
    mean_rollout: dict[str, float]  # the mean rollout's seconds by kind
    rollouts: int
    tail: float | None

    @property
    def critical(self) -> float:
        return self.model + self.trainer_exposed

    @property
    def ratio(self) -> float:
        return self.wall / self.critical if self.critical > 0 else float("inf")


# --- the computation -----------------------------------------------------------------------------------------


def kind_seconds(timeline: dict[str, Any]) -> dict[str, float]:
    """One rollout's seconds by span kind; ``other`` is its time under no span."""
    out: dict[str, float] = {}
    for span in (Span.from_dict(s) for s in timeline["spans"]):
        out[span.kind] = out.get(span.kind, 0.0) + span.seconds
    out[OTHER] = float(timeline["seconds"]) - sum(out.values())
    return out


def rollout_intervals(timelines: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """Each rollout's wall-clock interval, origin to origin + seconds."""
    return [(float(t["origin"]), float(t["origin"]) + float(t["seconds"])) for t in timelines]


def exposed_seconds(phases: dict[str, Any], cover: list[tuple[float, float]]) -> float:
    """Seconds of the trainer phases (swap, train, save, sync) that no interval of ``cover`` overlaps."""
    origin = float(phases["origin"])
    spans = [Span.from_dict(s) for s in phases["spans"] if s["kind"] in TRAINER_PHASES]
    mine = [(origin + s.start, origin + s.end) for s in spans]
    return union_seconds(mine + cover) - union_seconds(cover)


def _phase_start(phases: dict[str, Any], kind: str) -> float:
    return min((float(s["start"]) for s in phases["spans"] if s["kind"] == kind), default=0.0)


def step_figures(
    metrics: dict[str, Any], timelines: list[dict[str, Any]], cover: list[tuple[float, float]]
) -> StepFigures:
    """One step's figures from its ``metrics.jsonl`` line, its rollouts' timelines and every rollout's interval."""
    wall, rollout_phase = float(metrics["time/step"]), float(metrics["time/rollout"])
    trainer = {p: float(metrics.get(f"time/{p}", 0.0)) for p in TRAINER_PHASES}
    exposed = exposed_seconds(metrics["phases"], cover)
    by_rollout = [kind_seconds(t) for t in timelines]
    crit_i = max(range(len(timelines)), key=lambda i: (by_rollout[i].get(MODEL, 0.0), float(timelines[i]["seconds"])))
    crit, crit_seconds = by_rollout[crit_i], float(timelines[crit_i]["seconds"])
    overhead = {k: v for k, v in crit.items() if k != MODEL}
    phase_start = float(metrics["phases"]["origin"]) + _phase_start(metrics["phases"], "rollout")
    overhead[QUEUED] = float(timelines[crit_i]["origin"]) - phase_start
    overhead[TAIL] = rollout_phase - crit_seconds - overhead[QUEUED]
    overhead[OVERLAPPED] = sum(trainer.values()) - exposed
    overhead[BETWEEN] = wall - rollout_phase - sum(trainer.values())
    summary = summarize(timelines)
    assert summary is not None  # timelines is not empty
    mean = statistics.mean(float(t["seconds"]) for t in timelines)
    return StepFigures(
        step=int(metrics["step"]),
        wall=wall,
        rollout_phase=rollout_phase,
        trainer=trainer,
        trainer_exposed=exposed,
        model=crit.get(MODEL, 0.0),
        overhead=overhead,
        mean_rollout={k: share * mean for k, share in summary.shares.items()},
        rollouts=summary.rollouts,
        tail=summary.tail,
    )


def read_run(out: Path) -> list[StepFigures]:
    """Every step of a run's OUTPUT_DIR that has its phases and at least one rollout timeline."""
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [m for m in lines if "time/step" in m and m.get("phases")]
    timelines: dict[int, list[dict[str, Any]]] = {}
    for m in steps:
        path = out / "rollouts" / f"step_{int(m['step']):06d}.jsonl"
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
        timelines[int(m["step"])] = [r["timeline"] for r in rows if r.get("timeline")]
    cover = [iv for ts in timelines.values() for iv in rollout_intervals(ts)]
    return [step_figures(m, timelines[int(m["step"])], cover) for m in steps if timelines[int(m["step"])]]


# --- the report ----------------------------------------------------------------------------------------------


def _kinds(seconds: dict[str, float], *, least: float = 0.05) -> str:
    ranked = sorted(((k, v) for k, v in seconds.items() if abs(v) >= least), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v:.1f}" for k, v in ranked)


def concurrency(out: Path) -> int | None:
    """The run's ROLLOUT_CONCURRENCY (rollouts in flight at once), from its settings.json."""
    path = out / "settings.json"
    return json.loads(path.read_text()).get("rollout", {}).get("rollout_concurrency") if path.exists() else None


def report(figures: list[StepFigures], warmup: int, process_wall: float | None, slots: int | None) -> int:
    if not figures:
        print("no step with phases and rollout timelines in this run", file=sys.stderr)
        return 1
    if slots is not None:
        print(f"{figures[0].rollouts} rollouts a step, {slots} at a time (ROLLOUT_CONCURRENCY)")
    for f in figures:
        label = "warm" if f.step >= warmup else "cold, left out"
        trainer = ", ".join(f"{p} {s:.1f}" for p, s in f.trainer.items() if s >= 0.05)
        print(
            f"step {f.step} ({label}): wall {f.wall:.1f} s | critical path {f.critical:.1f} s = model {f.model:.1f} "
            f"(the longest of {f.rollouts} rollouts' model time) + trainer {f.trainer_exposed:.1f} ({trainer}) "
            f"| ratio {f.ratio:.2f}x"
        )
        print(f"  overhead {f.wall - f.critical:.1f} s: {_kinds(f.overhead)}")
        tail = f"; tail {f.tail:.2f}" if f.tail is not None else ""
        print(f"  mean rollout {sum(f.mean_rollout.values()):.1f} s: {_kinds(f.mean_rollout)}{tail}")
    warm = [f for f in figures if f.step >= warmup]
    if process_wall is not None:
        rest = process_wall - sum(f.wall for f in figures)
        print(f"process wall {process_wall:.1f} s; start-up and shutdown outside the steps {rest:.1f} s")
    if not warm:
        print(f"no warm step (steps >= {warmup}); run more steps", file=sys.stderr)
        return 1
    wall, crit = sum(f.wall for f in warm), sum(f.critical for f in warm)
    overhead: dict[str, float] = {}
    for f in warm:
        for k, v in f.overhead.items():
            overhead[k] = overhead.get(k, 0.0) + v / len(warm)
    verdict = "met" if wall <= TARGET * crit else "not met"
    print(f"warm steps {', '.join(str(f.step) for f in warm)}: overhead per step {_kinds(overhead)}")
    print(
        f"warm: wall {wall:.1f} s against critical path {crit:.1f} s (reference): ratio {wall / crit:.2f}x "
        f"(target <= {TARGET}x: {verdict})"
    )
    return 0


# --- the run -------------------------------------------------------------------------------------------------


def _stop(proc: subprocess.Popen) -> None:
    """The run's whole process group: SIGTERM (the run stops its server, trainer and containers), then SIGKILL."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _raise_exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def run(steps: int, out: Path) -> float:
    """The embedded default for ``steps`` steps into ``out``; its wall seconds."""
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_URL", "MODEL", "DATASET")}
    env.update(OUTPUT_DIR=str(out), NUM_ROLLOUTS=str(steps), RUN_ID="qwen-swe-bench-step")
    previous = {s: signal.signal(s, _raise_exit) for s in (signal.SIGINT, signal.SIGTERM)}
    log = (out.parent / "run.log").open("w")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        ["bash", "examples/qwen_swe/run_grpo.sh"],
        cwd=REPO_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, stopped as one
    )
    try:
        code = proc.wait()
    finally:
        _stop(proc)
        log.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    if code != 0:
        raise SystemExit(f"the run failed ({code}); its log: {out.parent / 'run.log'}")
    return time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3, help="GRPO steps to run (the first --warmup are cold)")
    ap.add_argument("--warmup", type=int, default=1, help="leading steps left out of the warm figure")
    ap.add_argument("--run", type=Path, help="report on this finished run's OUTPUT_DIR instead of starting one")
    ap.add_argument("--keep", action="store_true", help="keep the run's folder (checkpoints and weights included)")
    args = ap.parse_args(argv)
    if args.run:
        return report(read_run(args.run), args.warmup, None, concurrency(args.run))
    tmp = Path(tempfile.mkdtemp(prefix="bench_step_"))
    try:
        wall = run(args.steps, tmp / "run")
        print(f"command: {' '.join(sys.argv)} (steps={args.steps}, output {tmp / 'run'})")
        return report(read_run(tmp / "run"), args.warmup, wall, concurrency(tmp / "run"))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
