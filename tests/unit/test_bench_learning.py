"""The learning benchmark's own protocol logic (benchmarks/bench_learning.py) without a run: its phase clock, the
attempt funnel, the demonstration/GRPO split by bug site, the fit screen's choice of tasks. The protocol end to end is
tests/e2e/test_learning_protocol.py."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_learning
from benchmarks.bench_learning import PhaseClock, funnel, split_train

PATCH = (
    "diff --git a/pkg/mod.py b/pkg/mod.py\nindex 1..2 100644\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n"
    "@@ -3,3 +3,3 @@ def f(x):\n     a = 1\n-    return x - a\n+    return x + a\n \n"
)


def _row(iid: str, statement: str, patch: str = PATCH) -> dict:
    return {"instance_id": iid, "problem_statement": statement, "patch": patch}


def test_phase_clock_sums_each_phase_over_reruns_with_the_same_work(tmp_path):
    first = PhaseClock(tmp_path / "phase_times.json")
    first.add("warm_start", 900.0)
    first.add("rl", 600.0)  # then the run stops; the rerun skips the warm start and resumes GRPO
    second = PhaseClock(tmp_path / "phase_times.json")
    second.add("warm_start", 0.5)
    second.add("rl", 300.0)
    assert second.now == {"warm_start": 0.5, "rl": 300.0}
    assert second.all == {"warm_start": 900.5, "rl": 900.0}
    assert PhaseClock(tmp_path / "phase_times.json").all == second.all


def _attempt(iid: str, *calls: tuple[str, dict], patch: str = "", resolved: bool = False) -> dict:
    message = {
        "role": "assistant",
        "tool_calls": [{"function": {"name": n, "arguments": json.dumps(a)}} for n, a in calls],
    }
    return {"instance_id": iid, "conversation": {"messages": [message]}, "patch": patch, "resolved": resolved}


def test_funnel_counts_how_far_attempts_get_against_the_gold_patch():
    rows = {"t": _row("t", "bug")}
    read = ("read_file", {"file_path": "/testbed/pkg/mod.py"})
    attempts = [
        _attempt("t"),
        _attempt("t", ("read_file", {"file_path": "/testbed/pkg/other.py"})),
        _attempt(
            "t", read, ("edit", {"old_string": "    return x - a\n", "new_string": "    return x * a"}), patch="diff"
        ),
        _attempt(
            "t",
            read,
            ("edit", {"old_string": "return x - a", "new_string": "return x + a"}),
            patch="diff",
            resolved=True,
        ),
        {**_attempt("t", read), "status": "aborted"},
    ]
    assert funnel(attempts, rows) == {
        "attempts": 4,
        "tool_call": 3,
        "read_target": 2,
        "edit_buggy_line": 2,
        "exact_fix": 1,
        "patch": 2,
        "resolved": 1,
        "edit_error": 0,
        "recovered": 0,
    }
    refused = {"role": "tool", "content": "Failed to edit, 0 occurrences found for old_string in /testbed/pkg/mod.py"}
    for attempt in attempts[2:4]:
        attempt["conversation"]["messages"].insert(1, refused)
    counts = funnel(attempts, rows)
    assert (counts["edit_error"], counts["recovered"]) == (2, 1)


def test_split_train_keeps_grpo_sites_away_from_the_demonstrations():
    train = [{"instance_id": f"t{i}", "bug_site": f"m.py::f{i % 6}"} for i in range(24)]
    assert split_train(train, 0, 0.0) == (train, train)
    demo, rl = split_train(train, 0, 0.5)
    assert {r["bug_site"] for r in demo}.isdisjoint({r["bug_site"] for r in rl})
    assert len({r["bug_site"] for r in rl}) == 3 and len(demo) + len(rl) == 24
    assert split_train(train, 0, 0.5) == (demo, rl) and split_train(train, 1, 0.5) != (demo, rl)
    with pytest.raises(ValueError, match="rl-sites"):
        split_train(train, 0, 1.0)


def test_the_fit_screen_keeps_tasks_resolved_sometimes_with_seeds_of_its_own(tmp_path, monkeypatch):
    rows = [{"instance_id": f"t{i}"} for i in range(6)]
    screened = {"t0": 4, "t1": 2, "t2": 0, "t3": 1, "t5": 3}  # t4: every attempt an error (not graded)
    calls = []

    def evaluate(name, model, tasks, k, work, seed, temperature, server):
        calls.append((name, [r["instance_id"] for r in bench_learning.read_rows(tasks)], k, seed, server))
        return {"attempts": 16, "resolved": 10, "per_task": screened}

    monkeypatch.setattr(bench_learning, "evaluate_phase", evaluate)
    args = bench_learning.parser().parse_args(
        ["--seed", "7", "--fit-tasks", "2", "--fit-screen", "4", "--fit-candidates", "5"]
    )
    server = bench_learning.SharedServer(tmp_path)  # started by an evaluation: none here
    kept, res = bench_learning.screen_fit_tasks(rows, args, tmp_path / "m", tmp_path, 1.0, server)
    assert [r["instance_id"] for r in kept] == ["t1", "t3"]  # in order; not t0 (always), t2 (never), t4, t5 (>5th)
    assert calls == [("fit_screen", ["t0", "t1", "t2", "t3", "t4"], 4, 7 + bench_learning.SCREEN_SEED_OFFSET, server)]
    assert res["resolved"] == 10
