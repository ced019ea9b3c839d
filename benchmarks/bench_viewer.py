"""How fast the viewer of a large run opens: a generated run of 512 samples x 10 steps (conversations of a few KB
each, as the rollout dumps hold them) written, refreshed after one more step, and opened in headless Chromium.

References measured in the same run: reading and parsing every rollout file (what any viewer must do once), a blank
page in the same browser (its own start-up), and the same page with every step open at once (all the data on one
page, as the single-file viewer had it).

Run: .venv/bin/python -m benchmarks.bench_viewer [--steps 10] [--samples 512] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qwen_swe.viewer.build import write_viewer

WORDS = (
    "def",
    "return",
    "self",
    "value",
    "None",
    "import",
    "assert",
    "test",
    "error",
    "line",
    "file",
    "config",
    "parse",
    "result",
    "index",
    "module",
    "class",
    "raise",
    "path",
    "data",
    "<div>",
    "&amp;",
    "x = 1",
)


def _text(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    while sum(map(len, out)) < chars:
        out.append(rng.choice(WORDS) + ("\n" if rng.random() < 0.12 else " "))
    return "".join(out)


def _sample(rng: random.Random, step: int, group: int, index: int) -> dict[str, Any]:
    iid = f"repo_{group % 37}__pkg-{group * 7 + 3}"
    turns = rng.randint(3, 6)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": _text(rng, 600)},
        {"role": "user", "content": _text(rng, 800)},
    ]
    for t in range(turns):
        call = {
            "id": f"c{t}",
            "type": "function",
            "function": {
                "name": "run_shell_command",
                "arguments": json.dumps({"command": f"grep -n value src/mod_{t}.py"}),
            },
        }
        messages += [
            {"role": "assistant", "content": _text(rng, 80), "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{t}", "content": _text(rng, rng.randint(200, 700))},
        ]
    messages.append({"role": "assistant", "content": "done"})
    calls = [{"index": i, "sampled_tokens": rng.randint(20, 200)} for i in range(turns + 1)]
    sampled = sum(c["sampled_tokens"] for c in calls)
    dropped = rng.random() < 0.03
    resolved = not dropped and rng.random() < 0.2
    patch = "diff --git a/src/mod.py b/src/mod.py\n--- a/src/mod.py\n+++ b/src/mod.py\n@@ -1,3 +1,3 @@\n" + "".join(
        f"{'+' if i % 2 else '-'}{_text(rng, 40).strip()}\n" for i in range(rng.randint(4, 16))
    )
    return {
        "instance_id": iid,
        "group_index": group,
        "index": index,
        "status": "aborted" if dropped else "completed",
        "reward": None if dropped else (1.0 if resolved else -1.0),
        "resolved": resolved,
        "reward_hack_suspected": False,
        "drop_reason": "sandbox" if dropped else None,
        "drop_detail": "container gone" if dropped else None,
        "filtered": None,
        "outcome": "completed",
        "patch": patch,
        "turns": turns,
        "response_length": sampled + 900,
        "weight_version": step,
        "weight_versions": [step],
        "agent_seconds": rng.uniform(20, 300),
        "grade_seconds": rng.uniform(2, 9),
        "grade": {"resolved": resolved, "components": {"tests": 1.0 if resolved else 0.0}},
        "trajectory": {"sampled_tokens": sampled, "retained_sampled_tokens": sampled, "turns": turns},
        "reward_components": {"tests": 1.0 if resolved else 0.0},
        "sampled_tokens": sampled,
        "trained_tokens": sampled,
        "rollout_node": None,
        "conversation": {"messages": messages, "calls": calls, "output_cap": 4000},
    }


def write_step(run_dir: Path, step: int, samples: int, seed: int = 0) -> None:
    """One step's rollout dump and metrics line, as the trainer leaves them."""
    rng = random.Random(seed * 1000 + step)
    rows = [_sample(rng, step, i // 8, i % 8) for i in range(samples)]
    (run_dir / "rollouts").mkdir(parents=True, exist_ok=True)
    (run_dir / "rollouts" / f"step_{step:06d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept = [r for r in rows if r["status"] != "aborted"]
    with (run_dir / "metrics.jsonl").open("a") as fh:
        fh.write(
            json.dumps(
                {
                    "step": step,
                    "reward_mean": sum(r["reward"] for r in kept) / len(kept),
                    "resolve_rate": sum(r["resolved"] for r in kept) / len(kept),
                    "response_length_mean": sum(r["response_length"] for r in kept) / len(kept),
                    "dropped_samples": len(rows) - len(kept),
                    "clip_fraction": rng.uniform(0, 0.1),
                    "approx_kl": rng.uniform(0, 1e-3),
                }
            )
            + "\n"
        )


def generate_run(run_dir: Path, steps: int = 10, samples: int = 512, seed: int = 0) -> Path:
    """A training run's folder with ``steps`` steps of ``samples`` samples and one evaluation (its first 64)."""
    for step in range(steps):
        write_step(run_dir, step, samples, seed)
    evaluation = run_dir / f"eval_step_{steps - 1:06d}"
    evaluation.mkdir()
    rows = (run_dir / "rollouts" / f"step_{steps - 1:06d}.jsonl").read_text().splitlines()[:64]
    (evaluation / "rollouts.jsonl").write_text("".join(line + "\n" for line in rows))
    resolved = sum(json.loads(line)["resolved"] for line in rows)
    (evaluation / "report.json").write_text(
        json.dumps(
            {
                "resolve_rate": resolved / len(rows),
                "resolve_rate_ci95": [0.0, 1.0],
                "pass_at_k": {"1": resolved / len(rows)},
                "resolved_instances": resolved,
                "submitted_instances": len(rows),
            }
        )
    )
    return run_dir


def open_page(chromium: str, url: str, timeout: float = 300) -> tuple[str, float]:
    """The DOM once the page and every script it added have loaded, and the wall time from launch to it."""
    cmd = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--window-size=1400,1000",
        "--dump-dom",
        url,
    ]
    t0 = time.perf_counter()
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True).stdout
    return dom, time.perf_counter() - t0


def _marks(dom: str) -> tuple[float, float]:
    index, opened = (re.search(rf'data-{name}="(\d+)"', dom) for name in ("index-ms", "open-ms"))
    if not (index and opened):
        raise RuntimeError(f"the page did not render (no timing marks): {dom[:500]}")
    return float(index.group(1)) / 1e3, float(opened.group(1)) / 1e3


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=3, help="browser opens per page (median)")
    args = parser.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("no chromium on PATH (scripts/setup/10_system.sh installs it)")
    with tempfile.TemporaryDirectory() as tmp:
        run = generate_run(Path(tmp) / "run", args.steps - 1, args.samples)
        dumps = sorted((run / "rollouts").glob("step_*.jsonl"))
        t_read = min(
            _timed(lambda: [json.loads(line) for p in dumps for line in p.read_text().splitlines()]) for _ in range(3)
        )
        t_build = _timed(lambda: write_viewer(run))
        write_step(run, args.steps - 1, args.samples)  # the trainer's next step, then its refresh
        t_refresh = _timed(lambda: write_viewer(run))
        size_mb = sum(p.stat().st_size for p in (run / "rollouts").glob("*.jsonl")) / 1e6
        data = run / "viewer_data"
        index_kb = (data / "index.js").stat().st_size / 1e3
        step_mb = statistics.median(p.stat().st_size for p in data.glob("step_*.js")) / 1e6

        page = (run / "viewer.html").as_uri()
        blank = Path(tmp) / "blank.html"
        blank.write_text("<!DOCTYPE html><title>blank</title>")
        runs: dict[str, list[tuple[float, float, float]]] = {"step": [], "all": []}
        t_blank = []
        for _ in range(args.repeat):
            t_blank.append(open_page(chromium, blank.as_uri())[1])
            for name, url in (("step", page), ("all", page + "#open=all")):
                dom, wall = open_page(chromium, url)
                runs[name].append((*_marks(dom), wall))
        med = {name: [statistics.median(x[i] for x in rows) for i in range(3)] for name, rows in runs.items()}

    flags = " ".join(sys.argv[1:] if argv is None else argv)
    (index_s, step_s, step_wall), (_, all_s, all_wall) = med["step"], med["all"]
    print(f"command: .venv/bin/python -m benchmarks.bench_viewer {flags}".rstrip())
    print(
        f"run: {args.steps} steps x {args.samples} samples, rollout dumps {size_mb:.1f} MB; "
        f"index.js {index_kb:.1f} KB, one step's file {step_mb:.2f} MB"
    )
    print(
        f"write the viewer ({args.steps - 1} steps)  {t_build:7.3f} s   reference: parse every dump {t_read:7.3f} s"
        f"   ratio {t_build / t_read:.2f}x"
    )
    print(
        f"refresh after step {args.steps - 1}          {t_refresh:7.3f} s   ratio to the full write"
        f" {t_refresh / t_build:.2f}x"
    )
    print(
        f"in the page: index rendered at {index_s:.3f} s, the latest step's {args.samples} samples at {step_s:.3f} s;"
        f" every step at once {all_s:.3f} s   ratio one step / all {step_s / all_s:.2f}x"
    )
    print(
        f"browser wall (launch to loaded DOM, median of {args.repeat}): viewer {step_wall:.2f} s, every step "
        f"{all_wall:.2f} s, blank page {statistics.median(t_blank):.2f} s   ratio viewer / blank "
        f"{step_wall / statistics.median(t_blank):.2f}x"
    )


if __name__ == "__main__":
    main()
