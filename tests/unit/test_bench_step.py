"""The step benchmark's arithmetic (benchmarks/bench_step.py) on hand-built records: the critical path, the exposed
trainer time and the overhead split, exact to the second. The benchmark's run itself is not tested here."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_step
from benchmarks.bench_step import QUEUED, TAIL, exposed_seconds, read_run, rollout_intervals, step_figures

T0 = 1000.0  # the step's start, unix seconds


def _span(kind: str, start: float, end: float) -> dict:
    return {"kind": kind, "start": start, "end": end, "attrs": {}}


def _rollout(origin: float, seconds: float, spans: list[tuple[str, float, float]]) -> dict:
    return {"origin": origin, "seconds": seconds, "spans": [_span(*s) for s in spans]}


# Two rollouts. A starts with the step: boot 5, agent_start 20, model 10, tool 1, model 20, grade 4 (60 s, model
# 30). B starts 2 s later: boot 5, agent_start 20, model 12, grade 5, then 1 s under no span (43 s, model 12).
A = _rollout(T0, 60.0, [("boot", 0, 5), ("agent_start", 5, 25), ("model", 25, 35), ("tool", 35, 36)])
A["spans"] += [_span("model", 36, 56), _span("grade", 56, 60)]
B = _rollout(T0 + 2, 43.0, [("boot", 0, 5), ("agent_start", 5, 25), ("model", 25, 37), ("grade", 37, 42)])


def _metrics(step: int = 1, origin: float = T0) -> dict:
    """A step of 100 s: rollout phase 64 s (the batch collected 4 s after A), swap 0, train 30, save 2, sync 3, and
    1 s between the phases (the metrics written)."""
    spans = [_span("rollout", 0, 64), _span("swap", 64, 64), _span("train", 64, 94)]
    spans += [_span("save", 94, 96), _span("sync", 96, 99)]
    return {
        "step": step,
        "time/step": 100.0,
        "time/rollout": 64.0,
        "time/swap": 0.0,
        "time/train": 30.0,
        "time/save": 2.0,
        "time/sync": 3.0,
        "phases": {"origin": origin, "seconds": 100.0, "spans": spans},
    }


def test_critical_path_is_the_longest_model_chain_plus_the_trainer_phases():
    f = step_figures(_metrics(), [A, B], rollout_intervals([A, B]))
    assert f.model == 30.0  # A's 10 + 20, not B's 12
    assert f.trainer_exposed == 35.0  # train 30 + save 2 + sync 3: no rollout runs beside them
    assert f.critical == 65.0
    assert f.wall == 100.0
    assert f.ratio == pytest.approx(100.0 / 65.0)


def test_overhead_splits_wall_minus_critical_path_exactly_by_kind():
    f = step_figures(_metrics(), [A, B], rollout_intervals([A, B]))
    assert f.overhead == {
        "boot": 5.0,
        "agent_start": 20.0,
        "tool": 1.0,
        "grade": 4.0,
        "other": 0.0,
        QUEUED: 0.0,  # A started with the phase
        TAIL: 4.0,  # 64 s phase - A's 60 s
        "trainer overlapped": 0.0,
        "between phases": 1.0,  # 100 - 64 - 35
    }
    assert sum(f.overhead.values()) == f.wall - f.critical


def test_mean_rollout_by_kind_comes_from_the_timeline_shares():
    f = step_figures(_metrics(), [A, B], rollout_intervals([A, B]))
    assert f.rollouts == 2
    assert f.mean_rollout["model"] == pytest.approx(21.0)  # (30 + 12) / 2
    assert f.mean_rollout["agent_start"] == pytest.approx(20.0)
    assert f.mean_rollout["grade"] == pytest.approx(4.5)
    assert f.mean_rollout["other"] == pytest.approx(0.5)  # B's second under no span
    assert sum(f.mean_rollout.values()) == pytest.approx(51.5)
    assert f.tail == pytest.approx(60.0 / 51.5)  # slowest over median of two


def test_a_critical_rollout_started_late_counts_its_wait_as_queued():
    late = _rollout(T0 + 10, 50.0, [("boot", 0, 5), ("model", 5, 45)])  # model 40: the critical one
    f = step_figures(_metrics(), [A, late], rollout_intervals([A, late]))
    assert f.model == 40.0
    assert f.overhead[QUEUED] == 10.0
    assert f.overhead[TAIL] == 4.0  # 64 - 10 - 50
    assert f.overhead["boot"] == 5.0 and f.overhead["other"] == 5.0  # 50 s, 45 under spans
    assert sum(f.overhead.values()) == pytest.approx(f.wall - f.critical)


def test_trainer_time_beside_a_rollout_is_off_the_critical_path():
    # off-policy: a rollout of the next step runs from 70 s to 90 s of this step, inside its 30 s of training
    nxt = _rollout(T0 + 70, 20.0, [("model", 0, 20)])
    f = step_figures(_metrics(), [A, B], rollout_intervals([A, B, nxt]))
    assert f.trainer_exposed == 15.0  # train 64-70 and 90-94, save 2, sync 3
    assert f.overhead["trainer overlapped"] == 20.0
    assert f.critical == 45.0
    assert sum(f.overhead.values()) == pytest.approx(f.wall - f.critical)


def test_exposed_seconds_counts_only_the_trainer_phases():
    phases = _metrics()["phases"]
    assert exposed_seconds(phases, []) == 35.0  # the rollout phase itself is not a trainer phase
    assert exposed_seconds(phases, [(T0 + 60, T0 + 200)]) == 0.0


def test_read_run_pairs_each_step_with_its_rollouts_and_skips_what_has_no_timeline(tmp_path, capsys):
    step0 = _metrics(step=0, origin=T0 - 500)
    lines = [step0, {"eval/pass": 0.5, "step": 0}, _metrics(step=1), _metrics(step=2, origin=T0 + 100)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    rollouts = tmp_path / "rollouts"
    rollouts.mkdir()
    shift = {**A, "origin": T0 - 500}
    (rollouts / "step_000000.jsonl").write_text(json.dumps({"timeline": shift}) + "\n")
    rows = [{"timeline": A}, {"timeline": None}, {"timeline": B}]  # a dropped sample without one
    (rollouts / "step_000001.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # step 2 has no rollout file: nothing to measure it by
    figures = read_run(tmp_path)
    assert [f.step for f in figures] == [0, 1]
    assert figures[1].rollouts == 2 and figures[1].critical == 65.0
    assert bench_step.report(figures, warmup=1, process_wall=260.0, slots=4) == 0
    out = capsys.readouterr().out
    assert "step 0 (cold, left out)" in out
    assert "start-up and shutdown outside the steps 60.0 s" in out
    assert "ratio 1.54x (target <= 1.25x: not met)" in out  # warm: step 1 alone, 100 / 65
