"""The grader's logic on a second sandbox backend (tests/local_sandbox.py: local subprocesses in a private root),
so it runs without Docker and shows the grader (and the task pack's check, which is the grader's evaluations) needs
only ``qwen_swe.sandbox.base``. The real verdicts with real containers stay in tests/integration/test_rewards.py
and test_reward_hacking.py."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from qwen_swe.data.taskpack.check import check_task
from qwen_swe.data.taskpack.repo import make_repo
from qwen_swe.reward.bench import EVAL_OUTPUT_LIMIT
from qwen_swe.reward.harness import Grade, GradeStatus, evaluate, grade_async
from qwen_swe.reward.settings import RewardSettings
from qwen_swe.sandbox.base import SandboxRequest
from tests.local_sandbox import LocalSandboxes, namespaces_missing
from tests.task_pack import pack_task

UNAPPLIABLE = "diff --git a/nowhere.py b/nowhere.py\n--- a/nowhere.py\n+++ b/nowhere.py\n@@ -1 +1 @@\n-x\n+y\n"


def _testbed(instance: Mapping[str, Any], folder: Path) -> None:
    make_repo(str(instance["repo"]).split("/", 1)[1], folder)


@pytest.fixture(scope="module")
def task() -> dict:
    if (reason := namespaces_missing()) is not None:
        pytest.skip(reason)
    return pack_task()


def _grade(task: dict, patch: str, tmp_path: Path, **reward: Any) -> tuple[Grade, list[SandboxRequest]]:
    made: list[SandboxRequest] = []
    g = asyncio.run(
        grade_async(
            task,
            patch,
            reward=RewardSettings(**{"eval_timeout": 120.0, **reward}),
            run_id="local-test",
            log_dir=tmp_path,
            sandboxes=LocalSandboxes(_testbed, made),
        )
    )
    return g, made


def test_the_gold_patch_resolves_in_a_fresh_no_network_grading_machine(task, tmp_path):
    g, made = _grade(task, task["patch"], tmp_path)
    assert (g.status, g.reward, g.resolved, g.reason) == (GradeStatus.GRADED, 1.0, True, None)
    assert "reward_hack" not in g.details
    [req] = made
    assert (req.role, req.network, req.run_id, req.hide_future) == ("grade", "none", "local-test", False)
    assert (req.base_commit, req.output_limit) == (task["base_commit"], EVAL_OUTPUT_LIMIT)
    folder = Path(g.details["log_dir"])
    assert {p.name for p in folder.iterdir()} >= {"patch.diff", "eval.sh", "apply.log", "test_output.txt", "grade.json"}
    assert set(g.timings) == {"image", "start", "apply", "eval", "parse", "remove", "total"}
    assert json.loads((folder / "grade.json").read_text())["reward"] == 1.0


def test_no_machine_for_an_empty_patch_and_minus_one_for_one_that_does_not_apply(task, tmp_path):
    g, made = _grade(task, "", tmp_path)
    assert (g.status, g.reward, g.reason, made) == (GradeStatus.GRADED, -1.0, "empty patch", [])
    g, made = _grade(task, UNAPPLIABLE, tmp_path)
    assert (g.status, g.reward, g.reason) == (GradeStatus.GRADED, -1.0, "the patch does not apply")
    assert g.details["applied"] is False and len(made) == 1
    assert (Path(g.details["log_dir"]) / "apply.log").read_text().count("$ ") == 3  # swebench's whole ladder


def test_an_eval_past_its_timeout_is_aborted_not_scored(task, tmp_path):
    slow = {**task, "eval_script": "#!/bin/bash\nsleep 60\n"}
    g, _ = _grade(slow, task["patch"], tmp_path, eval_timeout=1.0)
    assert (g.status, g.reward) == (GradeStatus.ABORTED, 0.0)
    assert "EVAL_TIMEOUT" in (g.reason or "")


def test_a_loosened_grade_network_is_passed_on_recorded_and_logged(task, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="qwen_swe.reward.bench"):
        g, made = _grade(task, task["patch"], tmp_path, grade_network="host")
    assert [r.network for r in made] == ["host"] and g.details["network"] == "host"
    assert any("GRADE_NETWORK" in r.getMessage() for r in caplog.records)


def test_evaluate_runs_the_base_commit_without_the_graders_guards(task, tmp_path):
    made: list[SandboxRequest] = []
    g = asyncio.run(evaluate(task, "", eval_timeout=120.0, log_dir=tmp_path, sandboxes=LocalSandboxes(_testbed, made)))
    assert g.status == GradeStatus.GRADED and not g.resolved
    assert made[0].network == "none"
    failing = [t for t in json.loads(task["FAIL_TO_PASS"]) if g.details["status_map"].get(t) not in ("PASSED",)]
    assert failing == json.loads(task["FAIL_TO_PASS"])


def test_the_task_packs_check_runs_its_evals_on_the_same_backend(task, tmp_path):
    made: list[SandboxRequest] = []
    result = asyncio.run(check_task(task, tmp_path, LocalSandboxes(_testbed, made)))
    assert result.ok, result.problems
    assert {"base", "gold"} <= set(result.runs) and len(made) == len(result.runs)
    assert all(r.role == "grade" and r.run_id == "qwen-swe-check" for r in made)
