"""Per-step training metrics on rank 0: ``metrics.jsonl``, the same scalars to REPORT_TO's sinks (TensorBoard in
``tb/``, wandb; ``reporting.py``), one printed line per step, the run viewer refreshed, and ``rewards.png`` (reward
and resolve rate over steps) when the run ends.

On resume, lines of steps at or after the resumed step (written after the checkpoint, before a crash)
are dropped from ``metrics.jsonl`` and purged from TensorBoard, so every step appears once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qwen_swe.progress import step_label
from qwen_swe.train.reporting import make_sinks
from qwen_swe.viewer.build import refresh as refresh_viewer

log = logging.getLogger("qwen_swe.train_log")


class MetricsLog:
    def __init__(
        self,
        output_dir: Path,
        resume_step: int = 0,
        report_to: Sequence[str] = ("tensorboard",),
        config: dict[str, Any] | None = None,
    ) -> None:
        """``report_to``: the sinks besides ``metrics.jsonl`` (REPORT_TO); ``config``: the run's settings, which
        wandb shows beside its curves."""
        self.dir = Path(output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "metrics.jsonl"
        if self.path.exists():
            kept = [
                line
                for line in self.path.read_text().splitlines()
                if line.strip() and json.loads(line).get("step", -1) < resume_step
            ]
            self.path.write_text("".join(line + "\n" for line in kept))
        self.sinks = make_sinks(report_to, self.dir, resume_step, config)

    def write(self, metrics: dict[str, Any], total_steps: int) -> None:
        with self.path.open("a") as fh:
            fh.write(json.dumps(metrics, sort_keys=True, default=str) + "\n")
        step = int(metrics["step"])
        scalars = {
            key: float(value) for key, value in metrics.items() if isinstance(value, (int, float)) and key != "step"
        }
        for sink in self.sinks:
            sink.log(scalars, step)
        print(format_line(metrics, total_steps), flush=True)
        refresh_viewer(self.dir)

    def close(self) -> None:
        png = self.dir / "rewards.png"
        drawn: Path | None = png
        try:
            plot_rewards(self.path, png)
        except Exception as exc:  # noqa: BLE001 - a missing plot must not fail a finished run
            log.warning("could not draw %s: %r", png, exc)
            drawn = None
        for sink in self.sinks:
            try:
                sink.close(drawn)
            except Exception as exc:  # noqa: BLE001 - the metrics are on disk; a sink's last call must not fail the run
                log.warning("could not close the %s sink: %r", type(sink).__name__, exc)


def format_line(m: dict[str, Any], total_steps: int) -> str:
    update = (
        "skipped"
        if m.get("skipped_update")
        else (f"loss {m.get('loss', 0.0):+.4f} nll {m.get('nll', 0.0):.3f} grad {m.get('grad_norm', 0.0):.3f}")
    )
    kl_ref = f" kl to start {m['kl_ref']:.2e}" if "kl_ref" in m else ""
    busy = (
        f" | model busy {m['timeline/model_busy']:.2f} tail {m.get('timeline/tail', 1.0):.2f}"
        if "timeline/model_busy" in m
        else ""
    )
    return (
        f"{step_label(int(m['step']), total_steps, 'v' + str(m.get('weight_version')))} | "
        f"reward {m.get('reward_mean', 0.0):+.3f} "
        f"resolved {m.get('resolve_rate', 0.0):.2f} | samples {m.get('samples', 0)} "
        f"dropped {m.get('dropped_samples', 0):g} zero-var groups {m.get('zero_variance_groups', 0)} "
        f"resp len {m.get('response_length_mean', 0.0):.0f} | {update} clip {m.get('clip_fraction', 0.0):.3f} "
        f"kl {m.get('approx_kl', 0.0):.2e}{kl_ref} | rollout {m.get('time/rollout', 0.0):.1f}s "
        f"train {m.get('time/train', 0.0):.1f}s sync {m.get('time/sync', 0.0):.1f}s "
        f"save {m.get('time/save', 0.0):.1f}s{busy}"
    )


def plot_rewards(metrics_path: Path, png: Path) -> Path:
    """Reward mean and resolve rate (training, and evaluation where it ran) over steps, from ``metrics.jsonl``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    steps = [r["step"] + 1 for r in rows]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    try:
        ax1.plot(steps, [r.get("reward_mean", 0.0) for r in rows], marker="o")
        ax1.set_ylabel("reward mean")
        ax1.grid(alpha=0.3)
        ax2.plot(steps, [r.get("resolve_rate", 0.0) for r in rows], marker="o", color="tab:green", label="training")
        evals = [(s, r["eval/resolve_rate"]) for s, r in zip(steps, rows) if "eval/resolve_rate" in r]
        if evals:
            ax2.plot(*zip(*evals), marker="s", color="tab:red", label="evaluation")
            ax2.legend(loc="upper left")
        ax2.set_ylabel("resolve rate")
        ax2.set_xlabel("step")
        ax2.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no tick at step 1.2
        ax2.set_ylim(-0.05, 1.05)
        ax2.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(png, dpi=100)
    finally:
        plt.close(fig)
    return png
