"""Collect a run folder's metrics, rollout dumps and evaluation reports into the viewer page.

The data is embedded as JSON in the page and rendered by its script with ``textContent`` only, so patches and tool
outputs full of HTML stay text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

PAGE = Path(__file__).resolve().parent / "page.html"
STEP_FILE = re.compile(r"step_(\d+)\.jsonl$")
SAMPLE_KEYS = ("instance_id", "group_index", "index", "status", "reward", "resolved", "drop_reason", "drop_detail",
               "filtered", "outcome", "patch", "turns", "response_length", "sampled_tokens", "trained_tokens",
               "weight_version", "agent_seconds", "grade_seconds", "reward_components", "reward_hack_suspected",
               "conversation")
CURVE_KEYS = ("reward_mean", "resolve_rate", "response_length_mean", "dropped_samples", "eval/resolve_rate",
              "clip_fraction", "approx_kl", "logprob_diff_abs", "logprob_kl_k3")


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def collect(run_dir: Path) -> dict[str, Any]:
    samples = []
    for path in sorted((run_dir / "rollouts").glob("step_*.jsonl")):
        step = int(STEP_FILE.search(path.name).group(1))
        for row in _jsonl(path):
            samples.append({"step": step, **{k: row.get(k) for k in SAMPLE_KEYS}})
    steps = [{"step": m.get("step"), **{k: m.get(k) for k in CURVE_KEYS}} for m in _jsonl(run_dir / "metrics.jsonl")]
    evals = []
    for report in sorted(run_dir.glob("eval*/report.json")):
        data = json.loads(report.read_text())
        evals.append({"name": report.parent.name, "resolve_rate": data.get("resolve_rate"),
                      "ci95": data.get("resolve_rate_ci95"), "pass_at_k": data.get("pass_at_k"),
                      "resolved": data.get("resolved_instances"), "submitted": data.get("submitted_instances")})
    return {"run": run_dir.name, "steps": steps, "samples": samples, "evals": evals}


def render(data: dict[str, Any]) -> str:
    # "<" as its JSON escape: no patch or tool output can open or close an element inside the data block
    payload = json.dumps(data, default=str).replace("<", "\\u003c")
    return PAGE.read_text().replace("__RUN_DATA__", payload)


def write_viewer(run_dir: str | Path) -> Path:
    """Write ``RUN_DIR/viewer.html`` from what the run folder holds now."""
    run_dir = Path(run_dir)
    out = run_dir / "viewer.html"
    tmp = out.with_suffix(".html.tmp")
    tmp.write_text(render(collect(run_dir)))
    tmp.replace(out)
    return out
