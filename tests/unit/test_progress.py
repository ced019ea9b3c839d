"""Live progress: off a terminal (Slurm, nohup, a pipe), timed plain lines with the total, the rate, the ETA and the
step number of the step's metrics line; on a terminal, a bar with the same figures."""

from __future__ import annotations

import asyncio
import io
import re
import time

from qwen_swe.data.sample import Sample, Status, drop
from qwen_swe.errors import DropReason
from qwen_swe.progress import Meter, line, show, step_label
from qwen_swe.rollout.engine import run_batch
from qwen_swe.rollout.progress import BatchStats
from qwen_swe.rollout.settings import RolloutSettings
from qwen_swe.train.metrics import format_line


def _stats() -> BatchStats:
    stats = BatchStats(groups=2, planned=4, running=2)
    graded = Sample(group_index=0, index=0, metadata={"instance_id": "a", "resolved": True})
    graded.status, graded.reward = Status.COMPLETED, 1.0
    stats.count(graded)
    stats.count(drop(Sample(group_index=1, index=2, metadata={"instance_id": "b"}), DropReason.AGENT_ERROR, "500"))
    return stats


def test_a_line_carries_the_total_the_rate_the_eta_and_the_batch_counts():
    text = line("step 3/10 rollout", _stats(), 120.0, "samples")
    assert text == (
        "step 3/10 rollout: 2/4 samples, 1.00 samples/min, 2m00s elapsed, ETA 2m00s; reward +1.000, "
        "resolved 1, running 2, graded 1, dropped 1, 2 groups"
    )


def test_no_eta_before_the_first_item_ends_and_none_after_the_last():
    assert "ETA" not in line("grading", Meter(total=8), 30.0, "attempts")
    assert "ETA" not in line("grading", Meter(total=2, done=2), 30.0, "attempts")
    assert line("warm start: demonstrations", Meter(), 3725.0, "steps") == "warm start: demonstrations: 1h02m elapsed"
    assert "12.5 mutations/s" in line("generate", Meter(total=100, done=25), 2.0, "mutations")


def test_the_progress_label_and_the_metrics_line_number_a_step_alike():
    label = step_label(2, 10, "rollout")
    metrics_line = format_line({"step": 2, "weight_version": 2, "reward_mean": 0.5}, total_steps=10)
    assert label == "step 3/10 rollout" and metrics_line.startswith("step 3/10 v2 | ")


def test_off_a_terminal_a_line_is_printed_every_interval_and_at_the_end():
    out, meter = io.StringIO(), Meter(total=4)
    with show(meter, step_label(0, 2, "rollout"), unit="samples", interval=0.05, file=out):
        for _ in range(4):
            time.sleep(0.08)
            meter.advance(resolved=1)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 4 and all(x.startswith("step 1/2 rollout: ") for x in lines)
    assert all(re.search(r": [0-4]/4 samples, ", x) for x in lines)  # the total in every line
    assert any(re.search(r", [0-9.]+ samples/(s|min), .* elapsed, ETA \d+s; resolved \d$", x) for x in lines[:-1])
    assert lines[-1].startswith("step 1/2 rollout: 4/4 samples, ") and lines[-1].endswith("; resolved 4 (done)")
    assert "\x1b[" not in out.getvalue()  # plain text for a log file


def test_a_failed_block_still_prints_how_far_it_got():
    out, meter = io.StringIO(), Meter(total=3, done=1)
    try:
        with show(meter, "grading", unit="attempts", interval=60, file=out):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert out.getvalue().startswith("grading: 1/3 attempts, ") and out.getvalue().rstrip().endswith("(stopped)")


def test_on_a_terminal_a_bar_shows_the_same_figures():
    out, meter = io.StringIO(), Meter(total=4, done=3)
    with show(meter, "step 1/2 rollout", file=out, force_terminal=True):
        time.sleep(0.6)
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "step 1/2 rollout" in screen and "3/4 samples" in screen and "/s" in screen and "ETA " in screen


def test_a_batch_plans_its_samples_and_each_refill_so_the_total_stays_true():
    outcomes = {"a": [1.0, -1.0], "b": ["infra", -1.0, 1.0]}

    async def run_samples(samples: list[Sample]) -> None:
        for x in samples:
            outcome = outcomes[x.metadata["instance_id"]].pop(0)
            if outcome == "infra":
                stats.count(drop(x, DropReason.AGENT_ERROR, "500"))
                continue
            x.status, x.reward = Status.COMPLETED, outcome
            stats.count(x)

    groups = [
        [Sample(group_index=g, index=2 * g + i, metadata={"instance_id": iid}) for i in range(2)]
        for g, iid in enumerate(["a", "b"])
    ]
    stats = BatchStats()
    kept = asyncio.run(run_batch(run_samples, groups, stats, RolloutSettings(dropped_policy="replace")))
    assert len(kept) == 2 and (stats.done, stats.total) == (5, 5) and stats.dropped == 1
