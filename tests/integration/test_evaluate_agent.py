"""Evaluation with the agent, no trainer: real sandbox, real qwen-code, real proxy and grader, a scripted model
that replays the gold edit. The attempt is resolved, the predictions file is in the official format, an
instance whose image is missing is an error (not unresolved), and a re-run resumes without running anything."""

from __future__ import annotations

import json
import uuid

import pytest

from qwen_swe.evaluate.__main__ import main
from qwen_swe.paths import TASK_PACK, embedded_model_dir
from tests.scripted_server import ServerThread
from tests.task_pack import gold_edit
from tests.toolcall_text import hermes_call

pytestmark = [pytest.mark.docker, pytest.mark.agent]


def test_agent_evaluation_writes_predictions_and_a_report_and_resumes(tmp_path, monkeypatch, capsys):
    rows = [json.loads(line) for line in TASK_PACK.read_text().splitlines()]
    row = next(r for r in rows if gold_edit(r["patch"]))
    path, old, new = gold_edit(row["patch"])
    broken = dict(row, instance_id="qwenswe__missing-image-1", image="qwen-swe-test-missing-image:none")
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text(json.dumps(row) + "\n" + json.dumps(broken) + "\n")
    server = ServerThread(
        [
            hermes_call("read_file", file_path=f"/testbed/{path}"),
            hermes_call("edit", file_path=f"/testbed/{path}", old_string=old, new_string=new),
            "Fixed the bug.",
        ]
    )
    try:
        for key, value in {
            "VLLM_URL": server.url,
            "MODEL": str(embedded_model_dir()),
            "SERVED_MODEL_NAME": "scripted",
            "DATASET": str(dataset),
            "IMAGE_NAMESPACE": "",
            "MAX_TURNS": "6",
            "AGENT_TIMEOUT": "300",
            "TOOL_CHOICE": "auto",
            "EVAL_SAMPLES": "1",
            "ROLLOUT_CONCURRENCY": "1",
            "RUN_ID": f"eval-agent-{uuid.uuid4().hex[:8]}",
            "OUTPUT_DIR": str(tmp_path / "run"),
        }.items():
            monkeypatch.setenv(key, value)
        out = tmp_path / "eval"
        assert main(["--agent", "--out", str(out)]) == 0
    finally:
        server.stop()
    report = json.loads((out / "report.json").read_text())
    assert report["resolved_ids"] == [row["instance_id"]], report["attempts"]
    assert report["error_ids"] == [broken["instance_id"]] and report["unresolved_ids"] == []
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert {p["instance_id"] for p in predictions} == {row["instance_id"], broken["instance_id"]}
    assert all(set(p) == {"instance_id", "model_name_or_path", "model_patch"} for p in predictions)
    solved = next(p for p in predictions if p["instance_id"] == row["instance_id"])
    assert f"+{new}" in solved["model_patch"]
    rollouts = {r["instance_id"]: r for r in map(json.loads, (out / "rollouts.jsonl").read_text().splitlines())}
    assert rollouts[row["instance_id"]]["patch"] == solved["model_patch"] and rollouts[row["instance_id"]]["resolved"]
    calls = [
        c["function"]["name"]
        for m in rollouts[row["instance_id"]]["conversation"]["messages"]
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or []
    ]
    assert calls == ["read_file", "edit"]  # the whole attempt is kept, as a training step keeps its rollouts
    assert rollouts[broken["instance_id"]]["status"] == "aborted"
    before = (out / "results.jsonl").read_text()
    assert main(["--agent", "--out", str(out)]) == 0  # nothing left to run: no server needed, nothing appended
    assert (out / "results.jsonl").read_text() == before
    assert "resolved 1/2 instances" in capsys.readouterr().out


def test_periodic_evaluation_through_the_trainers_driver(tmp_path):
    """What the trainer's rank 0 does every EVAL_INTERVAL steps: the same engine, a report per step, metrics."""
    from qwen_swe.config.settings import Settings
    from qwen_swe.rollout.driver import RolloutDriver

    rows = [json.loads(line) for line in TASK_PACK.read_text().splitlines()]
    row = next(r for r in rows if gold_edit(r["patch"]))
    path, old, new = gold_edit(row["patch"])
    dataset = tmp_path / "eval.jsonl"
    dataset.write_text(json.dumps(row) + "\n")
    server = ServerThread(
        [
            hermes_call("read_file", file_path=f"/testbed/{path}"),
            hermes_call("edit", file_path=f"/testbed/{path}", old_string=old, new_string=new),
            "Fixed the bug.",
        ]
    )
    driver = None
    try:
        settings = Settings.build(
            vllm_url=server.url,
            model=str(embedded_model_dir()),
            served_model_name="scripted",
            dataset=str(dataset),
            eval_interval=2,
            image_namespace="",
            max_turns=6,
            agent_timeout=300.0,
            output_dir=tmp_path / "run",
            run_id=f"eval-periodic-{uuid.uuid4().hex[:8]}",
        )
        driver = RolloutDriver(settings, upstream=server.url, model=settings.model_name, served_model="scripted")
        metrics = driver.evaluate(4)
    finally:
        if driver is not None:
            driver.close()
        server.stop()
    assert metrics["eval/resolve_rate"] == 1.0 and metrics["eval/graded_attempts"] == 1 and metrics["eval/errors"] == 0
    report = json.loads((tmp_path / "run" / "eval_step_000004" / "report.json").read_text())
    assert report["resolved_ids"] == [row["instance_id"]]
