"""The evaluation report: pass@k's unbiased estimator, the Wilson interval, the harness's report keys, a
predictions file's bad lines named by line and field, the attempts' sampling seeds, and a finished
evaluation's re-run, which needs no server."""

from __future__ import annotations

import asyncio
import inspect
import json
import math
from dataclasses import asdict

import pytest
from swebench.harness import reporting

from qwen_swe.config.settings import Settings
from qwen_swe.data.sample import Sample, Status, run_of
from qwen_swe.evaluate import __main__ as evaluate_main
from qwen_swe.evaluate.agent_runs import run_attempts
from qwen_swe.evaluate.grade_only import RESULTS, append_line
from qwen_swe.evaluate.predictions import read_predictions
from qwen_swe.evaluate.report import EMPTY, ERROR, RESOLVED, UNRESOLVED, AttemptResult, build_report, pass_at_k, wilson


def test_pass_at_k_against_hand_values():
    assert pass_at_k(5, 0, 1) == 0.0 and pass_at_k(5, 5, 3) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(4, 2))  # 0.5
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_wilson_interval_against_a_known_value():
    lo, hi = wilson(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-3) and hi == pytest.approx(0.9433, abs=1e-3)
    assert wilson(0, 0) == (0.0, 1.0)


def test_the_report_has_the_harness_keys_and_counts_errors_apart():
    source = inspect.getsource(reporting.make_run_report)
    harness_keys = {
        "total_instances",
        "submitted_instances",
        "completed_instances",
        "resolved_instances",
        "unresolved_instances",
        "empty_patch_instances",
        "error_instances",
        "completed_ids",
        "incomplete_ids",
        "empty_patch_ids",
        "submitted_ids",
        "resolved_ids",
        "unresolved_ids",
        "error_ids",
        "schema_version",
    }
    assert all(f'"{k}"' in source for k in harness_keys), "swebench's report keys changed"
    results = [
        AttemptResult("a", 0, RESOLVED),
        AttemptResult("a", 1, UNRESOLVED),
        AttemptResult("b", 0, UNRESOLVED),
        AttemptResult("b", 1, RESOLVED),
        AttemptResult("c", 0, EMPTY),
        AttemptResult("d", 0, ERROR),
    ]
    report = build_report(results, dataset_ids=["a", "b", "c", "d", "e"], submitted_ids=["a", "b", "c", "d", "x"])
    assert harness_keys <= set(report)
    assert report["resolved_ids"] == ["a"] and report["unresolved_ids"] == ["b"]  # first attempts
    assert report["empty_patch_ids"] == ["c"] and report["error_ids"] == ["d"] and report["incomplete_ids"] == ["x"]
    assert report["completed_instances"] == 2 and report["total_instances"] == 5
    # pass@k over graded attempts per instance: a 1/2, b 1/2, c 0/1 (d's error is no attempt)
    assert report["graded_attempts"] == 5 and report["resolve_rate"] == pytest.approx(2 / 5)
    assert report["pass_at_k"] == {"1": pytest.approx((0.5 + 0.5 + 0.0) / 3)}


def test_bad_prediction_lines_are_named_and_the_rest_kept(tmp_path):
    lines = [
        json.dumps({"instance_id": "a", "model_name_or_path": "m", "model_patch": "diff"}),
        "{not json",
        json.dumps({"instance_id": "b", "model_patch": "x"}),
        json.dumps(["a list"]),
        json.dumps({"instance_id": "a", "model_name_or_path": "m", "model_patch": None}),
        json.dumps({"instance_id": "", "model_name_or_path": "m", "model_patch": ""}),
    ]
    path = tmp_path / "preds.jsonl"
    path.write_text("\n".join(lines) + "\n")
    preds, errors = read_predictions(path)
    assert [(p.instance_id, p.attempt, p.model_patch) for p in preds] == [("a", 0, "diff"), ("a", 1, "")]
    assert [e.split(": ", 1)[0] for e in errors] == [f"{path}:2", f"{path}:3", f"{path}:4", f"{path}:6"]
    assert "not JSON" in errors[0] and "'model_name_or_path' is missing" in errors[1]
    assert "JSON object" in errors[2] and "'instance_id' must be a non-empty string" in errors[3]


class _SeedRecorder:
    """An engine that records each attempt's sampling seed and resolves nothing (``run_attempts`` shares it)."""

    def __init__(self) -> None:
        self.seeds: dict[tuple[str, int], int] = {}

    async def run_sample(self, sample: Sample, stats) -> Sample:
        self.seeds[(sample.metadata["instance_id"], sample.index)] = run_of(sample).attempt_seed
        sample.status, sample.reward = Status.COMPLETED, -1.0
        sample.metadata.update(resolved=False, patch="", outcome="completed")
        return sample


def test_evaluations_of_one_seed_give_each_attempt_the_same_sampling_seed(tmp_path):
    rows = [{"instance_id": f"t-{i}", "problem_statement": "x", "repo": "r", "base_commit": "c"} for i in range(3)]

    def seeds(seed: int, out: str) -> dict[tuple[str, int], int]:
        engine = _SeedRecorder()
        asyncio.run(run_attempts(rows, Settings.build(seed=seed, eval_samples=2), tmp_path / out, engine=engine))
        return engine.seeds

    first, again, other = seeds(0, "a"), seeds(0, "b"), seeds(1, "c")
    assert first == again and len(first) == 6
    assert len(set(first.values())) == 6  # every attempt its own
    assert not set(first.values()) & set(other.values())


def test_a_finished_evaluation_rerun_reports_without_starting_a_server(tmp_path, monkeypatch):
    class Served(Exception):
        pass

    def serving(*args, **kwargs):
        raise Served

    monkeypatch.setattr(evaluate_main, "serving", serving)
    rows = {f"t-{i}": {"instance_id": f"t-{i}"} for i in range(2)}
    settings = Settings.build(eval_samples=2)
    for iid, k in [("t-0", 0), ("t-0", 1), ("t-1", 0)]:
        append_line(tmp_path / RESULTS, asdict(AttemptResult(iid, k, RESOLVED if iid == "t-0" else EMPTY, None)))
    with pytest.raises(Served):  # one attempt missing: the server is needed
        evaluate_main._agent(settings, rows, tmp_path)
    append_line(tmp_path / RESULTS, asdict(AttemptResult("t-1", 1, UNRESOLVED, "tests failed")))
    report = evaluate_main._agent(settings, rows, tmp_path)
    assert report["resolved_instances"] == 1 and report["submitted_instances"] == 2
