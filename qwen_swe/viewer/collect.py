"""What the viewer reads from a run or evaluation folder: the curves, and its parts (each training step's
``rollouts/step_N.jsonl``, each evaluation's folder) with their samples and a one-line summary of each; and per
training step, the trainer's phases and the step's ``timeline/`` figures from ``metrics.jsonl``, which the page draws
under the step's rollouts (a record written before timelines existed has none, and the page says so)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STEP_FILE = re.compile(r"step_(\d+)\.jsonl$")
EVAL_STEP = re.compile(r"eval_step_(\d+)$")
SAMPLE_KEYS = (
    "instance_id",
    "group_index",
    "index",
    "status",
    "reward",
    "resolved",
    "drop_reason",
    "drop_detail",
    "filtered",
    "outcome",
    "patch",
    "turns",
    "response_length",
    "sampled_tokens",
    "trained_tokens",
    "weight_version",
    "agent_seconds",
    "grade_seconds",
    "reward_components",
    "reward_hack_suspected",
    "conversation",
    "timeline",
)
CURVE_KEYS = (
    "reward_mean",
    "resolve_rate",
    "response_length_mean",
    "dropped_samples",
    "eval/resolve_rate",
    "clip_fraction",
    "approx_kl",
    "logprob_diff_abs",
    "logprob_kl_k3",
    "timeline/model_busy",
    "timeline/tail",
    "timeline/cache_hit_rate",
)
ROLLOUTS, RESULTS, REPORT = "rollouts.jsonl", "results.jsonl", "report.json"  # an evaluation folder's files


@dataclass(frozen=True)
class Part:
    """One unit the page opens on its own: a training step, or one evaluation."""

    key: str  # the data file's name, viewer_data/<key>.js
    kind: str  # "step" | "eval"
    label: str
    step: int | None
    source: Path  # the JSON lines its samples come from (may not exist yet), in an evaluation's own folder

    def stamp(self) -> list[int]:
        """Size and modification time of what its samples come from: an unchanged stamp keeps its data file."""
        if not self.source.is_file():
            return [0, 0]
        stat = self.source.stat()
        return [stat.st_size, stat.st_mtime_ns]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete line; a last line still being written (no newline yet) waits for the next refresh."""
    if not path.is_file():
        return []
    text = path.read_text()
    lines = text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]
    return [json.loads(line) for line in lines if line.strip()]


def _eval_part(folder: Path, key: str) -> Part:
    step = EVAL_STEP.search(folder.name)
    source = folder / ROLLOUTS if (folder / ROLLOUTS).is_file() else folder / RESULTS  # grade-only: no rollouts
    return Part(key, "eval", folder.name, int(step.group(1)) if step else None, source)


def find_parts(run_dir: Path) -> list[Part]:
    """Training steps in order, then evaluations: the folder itself when it is one, and its ``eval*/`` folders."""
    parts = []
    for path in sorted((run_dir / "rollouts").glob("step_*.jsonl")):
        match = STEP_FILE.search(path.name)
        if match:
            step = int(match.group(1))
            parts.append(Part(f"step_{step:06d}", "step", f"step {step}", step, path))
    if any((run_dir / name).is_file() for name in (ROLLOUTS, RESULTS, REPORT)):
        parts.append(_eval_part(run_dir, "root"))
    for folder in sorted(p for p in run_dir.glob("eval*") if p.is_dir()):
        if re.fullmatch(r"[\w.-]+", folder.name) and any((folder / n).is_file() for n in (ROLLOUTS, RESULTS, REPORT)):
            parts.append(_eval_part(folder, folder.name))
    return parts


def _from_result(row: dict[str, Any]) -> dict[str, Any]:
    """A grade-only evaluation's attempt (``results.jsonl``) in the shape of a rollout's row."""
    return {
        "instance_id": row.get("instance_id"),
        "index": row.get("attempt"),
        "outcome": row.get("outcome"),
        "resolved": row.get("outcome") == "resolved",
        "drop_detail": row.get("reason"),
        "status": "aborted" if row.get("outcome") == "error" else "completed",
        "grade_seconds": row.get("seconds"),
    }


def samples(part: Part) -> list[dict[str, Any]]:
    rows = read_jsonl(part.source)
    if part.source.name == RESULTS:
        rows = [_from_result(r) for r in rows]
    return [{"step": part.step, **{k: r.get(k) for k in SAMPLE_KEYS}} for r in rows]


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    kept = [r for r in rows if r.get("status") != "aborted"]
    rewards = [r["reward"] for r in kept if isinstance(r.get("reward"), (int, float))]
    return {
        "samples": len(rows),
        "dropped": len(rows) - len(kept),
        "resolved": sum(bool(r.get("resolved")) for r in kept),
        "not_trained": sum(bool(r.get("filtered")) for r in kept),
        "reward_mean": sum(rewards) / len(rewards) if rewards else None,
    }


def report(part: Part) -> dict[str, Any] | None:
    path = part.source.parent / REPORT
    if part.kind != "eval" or not path.is_file():
        return None
    data = json.loads(path.read_text())
    return {
        "resolve_rate": data.get("resolve_rate"),
        "ci95": data.get("resolve_rate_ci95"),
        "pass_at_k": data.get("pass_at_k"),
        "resolved": data.get("resolved_instances"),
        "submitted": data.get("submitted_instances"),
    }


def curves(run_dir: Path) -> list[dict[str, Any]]:
    return [{"step": m.get("step"), **{k: m.get(k) for k in CURVE_KEYS}} for m in read_jsonl(run_dir / "metrics.jsonl")]


def step_timelines(run_dir: Path) -> dict[int, dict[str, Any]]:
    """Per step: the trainer's phases (``phases``) and the step's ``timeline/`` and ``server/`` figures, from
    ``metrics.jsonl``."""
    out = {}
    for m in read_jsonl(run_dir / "metrics.jsonl"):
        if isinstance(m.get("step"), int):
            figures = {
                k: v for k, v in m.items() if k.startswith(("timeline/", "server/")) and isinstance(v, (int, float))
            }
            if m.get("phases") or figures:  # lines written before timelines existed have neither
                out[m["step"]] = {"phases": m.get("phases"), "figures": figures}
    return out
