"""Grade-only evaluation over the local task pack with real containers: a predictions file with gold, no-op, empty,
malformed and unknown lines gives the right report, and a re-run with the same folder grades nothing again."""

from __future__ import annotations

import json
import uuid

import pytest
from swebench.harness import grading as grading_module
from swebench.harness.grading import get_eval_report
from swebench.harness.log_parsers.python import parse_log_pytest

from qwen_swe.evaluate.__main__ import main
from qwen_swe.paths import TASK_PACK
from qwen_swe.reward import scoring
from tests.integration.test_rewards import noop_patch

pytestmark = pytest.mark.docker


def test_grade_only_report_and_resume(tmp_path, monkeypatch, capsys):
    rows = [json.loads(line) for line in TASK_PACK.read_text().splitlines()][:2]
    a, b = rows[0]["instance_id"], rows[1]["instance_id"]
    lines = [
        json.dumps({"instance_id": a, "model_name_or_path": "gold", "model_patch": rows[0]["patch"]}),
        json.dumps({"instance_id": a, "model_name_or_path": "gold", "model_patch": noop_patch(rows[0]["patch"])}),
        json.dumps({"instance_id": b, "model_name_or_path": "gold", "model_patch": ""}),
        "this line is not json",
        json.dumps({"instance_id": "nope__missing-1", "model_name_or_path": "m", "model_patch": "x"}),
    ]
    preds = tmp_path / "predictions.jsonl"
    preds.write_text("\n".join(lines) + "\n")
    ids = tmp_path / "ids.txt"
    ids.write_text(f"{a}\n{b}\n")
    for key in ("VLLM_URL", "MODEL", "DATASET"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("RUN_ID", f"eval-{uuid.uuid4().hex[:8]}")
    out = tmp_path / "eval"
    argv = [
        "--predictions",
        str(preds),
        "--out",
        str(out),
        "--instance-list",
        str(ids),
        "--output-dir",
        str(tmp_path / "run"),
        "--dataset",
        str(TASK_PACK),
    ]  # the embedded default trains on generated tasks
    assert main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["resolved_ids"] == [a] and report["empty_patch_ids"] == [b] and report["error_ids"] == []
    assert report["unknown_ids"] == ["nope__missing-1"] and len(report["bad_lines"]) == 1
    assert report["bad_lines"][0].startswith(f"{preds}:4: not JSON")
    assert report["total_instances"] == 2 and report["submitted_instances"] == 2
    outcomes = {(r["instance_id"], r["attempt"]): r["outcome"] for r in report["attempts"]}
    assert outcomes == {(a, 0): "resolved", (a, 1): "unresolved", (b, 0): "empty_patch"}
    assert report["pass_at_k"]["1"] == pytest.approx((0.5 + 0.0) / 2)
    graded = (out / "results.jsonl").read_text()

    # swebench's own get_eval_report reads the same logs to the same verdicts (the pack's repos use pytest's parser)
    monkeypatch.setitem(grading_module.MAP_REPO_TO_PARSER, rows[0]["repo"], parse_log_pytest)
    monkeypatch.setitem(
        grading_module.MAP_REPO_VERSION_TO_SPECS,
        rows[0]["repo"],
        {str(rows[0].get("version", "")): {"test_cmd": "python3 -m pytest -rA"}},
    )
    verdicts = []
    for log in sorted((out / "grades" / a).glob("*/test_output.txt")):
        patch = (log.parent / "patch.diff").read_text()
        official = get_eval_report(
            scoring.test_spec_for(rows[0], rows[0]["eval_script"]),
            {"instance_id": a, "model_name_or_path": "m", "model_patch": patch},
            str(log),
            False,
        )
        verdicts.append((patch == rows[0]["patch"], official[a]["resolved"]))
    assert sorted(verdicts) == [(False, False), (True, True)], verdicts

    assert main(argv) == 0  # resumes: nothing is graded twice
    assert (out / "results.jsonl").read_text() == graded
    assert json.loads((out / "report.json").read_text())["resolved_ids"] == [a]
    assert "resolved 1/2 instances" in capsys.readouterr().out
