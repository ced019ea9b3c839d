"""Grading against the local task pack in real containers: every task's gold patch resolves, and empty, wrong,
unappliable and test-tampering patches do not; infrastructure failures are aborted, never -1; nothing is left
behind, not even by a runner killed with SIGKILL mid-grade."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import docker
import pytest

from qwen_swe.config.settings import Settings
from qwen_swe.paths import REPO_ROOT, TASK_PACK
from qwen_swe.reward import scoring as grading
from qwen_swe.reward.harness import Grade, grade_async
from qwen_swe.sandbox.docker import DockerSandbox
from qwen_swe.sandbox.docker_host import LABEL, containers_of, reap
from qwen_swe.sandbox.factory import DockerSandboxes
from tests.task_pack import BUILD_HINT, missing, require_images

pytestmark = pytest.mark.docker


def _sections(settings: Settings) -> dict:
    """The grader's arguments from a run's settings, as the rollout engine passes them."""
    return {"reward": settings.reward, "sandbox": settings.sandbox, "log_dir": settings.output_dir / "grades"}


FORCE_PASS_CONFTEST = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
"""


def _load_tasks() -> list[dict]:
    if not TASK_PACK.is_file():
        return []
    return [json.loads(line) for line in TASK_PACK.read_text().splitlines() if line.strip()]


TASKS = _load_tasks()
IDS = [t["instance_id"] for t in TASKS] or ["no-task-pack"]


@pytest.fixture(scope="module")
def tasks() -> dict[str, dict]:
    if not TASKS:
        missing(f"no task pack at {TASK_PACK}; {BUILD_HINT}")
    return {t["instance_id"]: t for t in require_images(TASKS)}


# --- patches derived from each task's gold patch ---------------------------------------------------
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _rewrite_first_hunk(gold: str, added: str, keep_removals: bool) -> str:
    """The gold patch's first hunk with its additions replaced by ``added`` (old side unchanged, so it applies)."""
    first = grading.split_patch(gold)[0]
    hunk = first.hunks[0]
    m = _HUNK.match(hunk[0])
    body = [
        line if keep_removals or not line.startswith("-") else " " + line[1:]
        for line in hunk[1:]
        if not line.startswith("+")
    ]
    changed = [
        i
        for i, (old, line) in enumerate(zip([x for x in hunk[1:] if not x.startswith("+")], body))
        if old.startswith("-")
    ]
    body.insert(changed[0] if changed else len(body) // 2, added)
    new_count = sum(1 for line in body if line.startswith((" ", "+")))
    header = f"@@ -{m.group(1)},{m.group(2) or 1} +{m.group(3)},{new_count} @@\n"
    return "".join(first.header) + header + "".join(body)


def wrong_patch(gold: str) -> str:
    """Deletes what the gold patch deletes and adds an import that cannot succeed: the module breaks."""
    return _rewrite_first_hunk(gold, "+import qwen_swe_module_that_does_not_exist\n", keep_removals=True)


def noop_patch(gold: str) -> str:
    """Adds a comment line to the file the gold patch changes, and nothing else."""
    return _rewrite_first_hunk(gold, "+# qwen-swe: looks busy\n", keep_removals=False)


def unappliable_patch(gold: str) -> str:
    first = grading.split_patch(gold)[0]
    path = first.paths[-1]
    return (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -3,3 +3,3 @@\n"
        "-this line is not in the file\n-nor is this one\n-nor this\n+x = 1\n+y = 2\n+z = 3\n"
    )


def tamper_patch(task: dict) -> str:
    """A conftest.py forcing every test to pass, a pytest.ini, an edit of a test-patch file, and a no-op change."""
    test_file = sorted(grading.patch_files(task["test_patch"]))[0]
    conftest = "".join(f"+{line}\n" for line in FORCE_PASS_CONFTEST.splitlines())
    n = len(FORCE_PASS_CONFTEST.splitlines())
    return (
        f"diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n"
        f"@@ -0,0 +1,{n} @@\n{conftest}"
        "diff --git a/pytest.ini b/pytest.ini\nnew file mode 100644\n--- /dev/null\n+++ b/pytest.ini\n"
        "@@ -0,0 +1,2 @@\n+[pytest]\n+addopts = -p no:randomly\n"
        f"diff --git a/{test_file} b/{test_file}\n--- a/{test_file}\n+++ b/{test_file}\n"
        "@@ -1 +1,2 @@\n+import pytest; pytestmark = pytest.mark.skip\n x\n" + noop_patch(task["patch"])
    )


# --- all per-task grades, run concurrently once --------------------------------------------------
@pytest.fixture(scope="module")
def graded(tasks, tmp_path_factory) -> dict[tuple[str, str], Grade]:
    rid = f"test-{uuid.uuid4().hex[:10]}"
    settings = Settings.build(output_dir=tmp_path_factory.mktemp("grades"), eval_timeout=300)
    kinds = {
        "gold": lambda t: t["patch"],
        "empty": lambda t: "",
        "wrong": lambda t: wrong_patch(t["patch"]),
        "unappliable": lambda t: unappliable_patch(t["patch"]),
        "tamper": tamper_patch,
    }

    async def run_all():
        client = docker.from_env(timeout=120)
        limit, boots = asyncio.Semaphore(3), asyncio.Semaphore(2)

        async def one(task, kind):
            async with limit:
                return await grade_async(
                    task,
                    kinds[kind](task),
                    reward=settings.reward,
                    sandbox=settings.sandbox,
                    log_dir=settings.output_dir / "grades",
                    run_id=rid,
                    mode="binary",
                    sandboxes=DockerSandboxes(settings.sandbox, client=client, boot_limit=boots),
                )

        keys = [(iid, kind) for iid in tasks for kind in kinds]
        try:
            results = await asyncio.gather(*(one(tasks[iid], kind) for iid, kind in keys))
        finally:
            client.close()
        return dict(zip(keys, results))

    try:
        return asyncio.run(run_all())
    finally:
        assert reap(rid) == 0, "grades left containers behind"


@pytest.mark.parametrize("iid", IDS)
def test_gold_patch_resolves(graded, iid):
    g = graded[(iid, "gold")]
    assert (g.status, g.reward, g.resolved, g.f2p_passed, g.p2p_passed) == ("graded", 1.0, True, 1.0, 1.0), g.reason
    assert g.details["apply_cmd"] == "git apply --verbose" and g.details["dropped"] == []
    assert Path(g.details["log_path"]).read_text().count(">>>>> Start Test Output") >= 1
    assert json.loads(Path(g.details["log_dir"], "grade.json").read_text())["resolved"] is True


@pytest.mark.parametrize("iid", IDS)
def test_empty_wrong_unappliable_patches_score_minus_one(graded, iid):
    empty, wrong, bad = graded[(iid, "empty")], graded[(iid, "wrong")], graded[(iid, "unappliable")]
    assert (empty.status, empty.reward, empty.reason) == (
        "graded",
        -1.0,
        "empty patch",
    ) and "image" not in empty.details
    assert (wrong.status, wrong.reward, wrong.resolved) == ("graded", -1.0, False), wrong.reason
    assert wrong.details["applied"] and wrong.f2p_passed < 1.0
    assert (bad.status, bad.reward, bad.reason) == ("graded", -1.0, "the patch does not apply")
    assert "patch --batch --fuzz=5" in Path(bad.details["log_dir"], "apply.log").read_text()


@pytest.mark.parametrize("iid", IDS)
def test_tampering_patch_is_dropped_and_scores_minus_one(graded, iid):
    g = graded[(iid, "tamper")]
    assert (g.status, g.reward, g.resolved) == ("graded", -1.0, False)
    reasons = {d["path"]: d["reason"] for d in g.details["dropped"]}
    assert reasons["conftest.py"] == reasons["pytest.ini"] == "test hook or config file"
    assert len(reasons) == 3 and g.details["dropped_hunks"] == 3
    assert g.details["applied"] and g.f2p_passed < 1.0  # graded without the tampering parts


def test_forcing_conftest_would_resolve_without_the_filter(tasks, run_id):
    """The threat is real: applied as is, the tampering conftest turns the failing tests into passes."""
    task = next(iter(tasks.values()))
    script = grading.eval_script(task)

    async def body():
        async with DockerSandbox(task["image"], run_id=run_id, role="grade", network="none", hide_future=False) as sb:
            await sb.write_file("/testbed/conftest.py", FORCE_PASS_CONFTEST)
            await sb.write_file("/eval.sh", script, mode=0o755)
            return (await sb.exec("/bin/bash /eval.sh", timeout=300)).output

    verdict = grading.judge_log(task, asyncio.run(body()), script)
    assert verdict.found and verdict.resolved


def test_modes_fractional_and_shaped(tasks, run_id, tmp_path):
    task = next(iter(tasks.values()))
    settings = Settings.build(output_dir=tmp_path)

    async def body():
        gold = await grade_async(
            task,
            task["patch"],
            reward=settings.reward,
            sandbox=settings.sandbox,
            log_dir=settings.output_dir / "grades",
            run_id=run_id,
            mode="fractional",
        )
        stats = {"response_tokens": 10, "tool_calls": 3, "completed": True}
        wrong = await grade_async(
            task,
            wrong_patch(task["patch"]),
            reward=settings.reward,
            sandbox=settings.sandbox,
            log_dir=settings.output_dir / "grades",
            run_id=run_id,
            mode="shaped",
            agent_stats=stats,
        )
        return gold, wrong

    gold, wrong = asyncio.run(body())
    assert gold.reward == 1.0 and gold.details["components"] == {"f2p": 1.0}
    comps = wrong.details["components"]
    assert (
        comps["gold_file"] == settings.reward.shaped_gold_file
        and comps["completion"] == settings.reward.shaped_completion
    )
    assert not wrong.resolved and -1.0 < wrong.reward <= 0.5


def test_missing_image_is_aborted_not_minus_one(tasks, run_id, tmp_path):
    task = dict(next(iter(tasks.values())), image="qwen-swe-test-missing-image:none")
    g = asyncio.run(grade_async(task, task["patch"], **_sections(Settings.build(output_dir=tmp_path)), run_id=run_id))
    assert (g.status, g.reward, g.resolved) == ("aborted", 0.0, False)
    assert "qwen-swe-test-missing-image:none" in g.reason and "taskpack build" in g.reason


def test_eval_timeout_is_aborted_and_leaves_no_container(tasks, run_id, tmp_path, docker_client):
    task = dict(next(iter(tasks.values())), eval_script="#!/bin/bash\nsleep 281 & sleep 282\n")
    g = asyncio.run(
        grade_async(
            task, task["patch"], **_sections(Settings.build(output_dir=tmp_path, eval_timeout=2)), run_id=run_id
        )
    )
    assert (g.status, g.reward) == ("aborted", 0.0) and "timed out" in g.reason
    assert containers_of(docker_client, run_id) == []


def test_concurrent_grades_of_one_instance_keep_separate_logs(tasks, run_id, tmp_path):
    task = next(iter(tasks.values()))
    patches = [task["patch"], wrong_patch(task["patch"])]

    async def body():
        return await asyncio.gather(
            *(grade_async(task, p, **_sections(Settings.build(output_dir=tmp_path)), run_id=run_id) for p in patches)
        )

    grades = asyncio.run(body())
    assert [g.reward for g in grades] == [1.0, -1.0]
    assert len({g.details["log_dir"] for g in grades}) == 2
    for g, p in zip(grades, patches):
        assert Path(g.details["log_dir"], "patch.diff").read_text() == p
        log = Path(g.details["log_path"]).read_text()
        assert log.count(">>>>> Start Test Output") == 1  # exactly one eval run in each log
        assert ("qwen_swe_module_that_does_not_exist" in log) == (p != task["patch"])


_RUNNER = """
import sys, json
from pathlib import Path
from qwen_swe.reward.harness import grade
task = json.loads(sys.argv[1])
print(grade(task, task["patch"], log_dir=Path(sys.argv[3]) / "grades", run_id=sys.argv[2]))
"""


def test_sigkilled_grader_leaves_nothing_after_reap(tasks, run_id, tmp_path, docker_client):
    task = dict(next(iter(tasks.values())), eval_script="#!/bin/bash\nsleep 600\n")
    proc = subprocess.Popen([sys.executable, "-c", _RUNNER, json.dumps(task), run_id, str(tmp_path)], cwd=REPO_ROOT)
    flt = {"label": [f"{LABEL}.run={run_id}", f"{LABEL}.role=grade"]}

    def at_eval() -> bool:  # the grade container runs the eval script (not merely created)
        for container in docker_client.containers.list(filters=flt, ignore_removed=True):
            with contextlib.suppress(docker.errors.APIError):  # gone or not yet started
                if any("sleep 600" in " ".join(row) for row in container.top()["Processes"] or []):
                    return True
        return False

    try:
        deadline = time.monotonic() + 300
        while not at_eval():
            assert proc.poll() is None and time.monotonic() < deadline, "the grade never reached its eval"
            time.sleep(0.2)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert len(docker_client.containers.list(all=True, filters=flt, ignore_removed=True)) == 1
    assert reap(run_id) == 1
    assert containers_of(docker_client, run_id) == []
