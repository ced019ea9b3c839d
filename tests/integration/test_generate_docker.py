"""Generated tasks in real containers: the grader's verdicts, and what a rollout's sandbox shows the agent."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from qwen_swe.data.generate.__main__ import build_images
from qwen_swe.data.generate.tasks import generate
from qwen_swe.data.taskpack import REPOS_DIR
from qwen_swe.data.taskpack.check import check_task
from qwen_swe.reward.harness import evaluate
from qwen_swe.sandbox.docker import DockerSandbox
from qwen_swe.sandbox.docker_host import reap
from qwen_swe.sandbox.settings import SandboxSettings

pytestmark = pytest.mark.docker
RUN_ID = "qwen-swe-test-generate"
SANDBOX = SandboxSettings(image_namespace="")


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    work = tmp_path_factory.mktemp("gen")
    gen = generate([REPOS_DIR / "textkit"], seed=1, count=3, heldout_fraction=0.34, workdir=work)
    build_images(gen)
    yield gen
    reap(RUN_ID)


def test_generated_task_passes_the_pack_check(generated, tmp_path):
    row = generated.tasks[0].row
    result = asyncio.run(check_task(row, tmp_path))
    assert result.ok, result.problems
    f2p = json.loads(row["FAIL_TO_PASS"])
    assert all(result.runs["base"].get(t) != "PASSED" for t in f2p)
    assert all(result.runs["gold"].get(t) == "PASSED" for t in f2p)


def test_editing_tests_is_not_a_fix(generated, tmp_path):
    """The eval script resets test files to base_commit, so a patch that deletes the failing test gets nothing."""
    row = generated.tasks[0].row
    test_file = json.loads(row["FAIL_TO_PASS"])[0].split("::")[0]

    async def grade_deleting_test() -> tuple:
        box = DockerSandbox.for_instance(
            SANDBOX, row, run_id=RUN_ID, role="probe", base_commit=row["base_commit"], hide_future=False
        )
        async with box:
            await box.exec(f"rm {test_file}", timeout=60)
            real_patch = await box.git_diff("/testbed")
        grade = await evaluate(row, real_patch, sandbox=SANDBOX, run_id=RUN_ID, log_dir=tmp_path)
        return real_patch, grade

    real_patch, grade = asyncio.run(grade_deleting_test())
    assert f"diff --git a/{test_file} b/{test_file}\ndeleted file mode" in real_patch
    assert grade.details.get("applied") and not grade.resolved and not grade.aborted


def test_rollout_sandbox_shows_only_the_bug(generated):
    task = generated.tasks[-1]
    row, mutation = task.row, task.mutation

    async def look() -> tuple[str, str, str]:
        box = DockerSandbox.for_instance(
            SANDBOX, row, run_id=RUN_ID, role="rollout", base_commit=row["base_commit"], hide_future=True
        )
        async with box:
            head = (await box.exec("git rev-parse HEAD", timeout=60)).output.strip()
            commits = (
                await box.exec("git rev-list --all --reflog | wc -l; git for-each-ref | wc -l", timeout=60)
            ).output.split()
            line = (await box.exec(f"sed -n {mutation.lineno}p {mutation.path}", timeout=60)).output
        return head, " ".join(commits), line

    head, counts, line = asyncio.run(look())
    assert head == row["base_commit"]
    assert counts == "1 1", "other task commits or the clean commit are still reachable"
    assert line == mutation.new


def test_reuse_skips_a_generation_with_the_same_inputs_and_redoes_a_changed_one(tmp_path, capsys):
    from qwen_swe.data.generate.__main__ import main

    repo = tmp_path / "textkit"
    shutil.copytree(REPOS_DIR / "textkit", repo)
    args = ["--seed", "1", "--count", "2", "--heldout", "0.5", "--repo", str(repo), "--out", str(tmp_path / "out")]
    assert main(args + ["--reuse"]) == 0  # nothing there yet: generates
    first = (tmp_path / "out" / "train.jsonl").read_text()
    assert "generate: reused" not in capsys.readouterr().out
    assert main(args + ["--reuse"]) == 0
    assert "generate: reused" in capsys.readouterr().out and (tmp_path / "out" / "train.jsonl").read_text() == first
    (repo / "textkit" / "slug.py").write_text((repo / "textkit" / "slug.py").read_text() + "\n# changed\n")
    assert main(args + ["--reuse"]) == 0  # the repository changed: its tasks are made again
    assert "generate: reused" not in capsys.readouterr().out
