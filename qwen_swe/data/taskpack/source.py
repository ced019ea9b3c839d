"""Task sources -> SWE-bench rows (``tasks.jsonl``), deterministically.

A task is written as files, not as diffs, so it stays easy to edit: ``src/<instance_id>/`` holds
``task.json`` (repo, created_at, FAIL_TO_PASS, PASS_TO_PASS, ...), ``problem.md``, and the changed files in
full under ``gold/`` (the fix), ``test/`` (the tests) and optionally ``careless/`` (a fix that passes
FAIL_TO_PASS but breaks PASS_TO_PASS). The diffs are computed here with git against the base commit.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT

from qwen_swe.data.taskpack import SRC_DIR, TASKS_JSONL
from qwen_swe.data.taskpack.repo import copy_files, git, make_repo
from qwen_swe.errors import TaskPackError
from qwen_swe.reward.testfiles import is_test_path

VERSION = "1.0"
HEREDOC = "EOF_114329324912"  # swebench's delimiter
ID_RE = re.compile(r"(?P<owner>[a-z0-9]+)__(?P<name>[a-z0-9_]+)-(?P<number>\d+)")


@dataclass(frozen=True)
class TaskSource:
    instance_id: str
    repo: str  # "owner/name"; the files are in repos/<name>/
    created_at: str
    kind: str
    difficulty: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    problem_statement: str
    folder: Path

    @property
    def repo_name(self) -> str:
        return self.repo.split("/", 1)[1]


def image_name(instance_id: str) -> str:
    """The local image of a task, in SWE-bench's naming with the project's own namespace."""
    return f"qwen-swe/sweb.eval.x86_64.{instance_id.lower()}:latest"


def load_sources(src_dir: Path = SRC_DIR) -> list[TaskSource]:
    """Every task folder under ``src_dir``, sorted by instance id, with its metadata checked."""
    sources = []
    for folder in sorted(p for p in src_dir.iterdir() if p.is_dir()):
        match = ID_RE.fullmatch(folder.name)
        if match is None:
            raise TaskPackError(f"task folder {folder.name!r} is not named owner__repo-N (e.g. qwenswe__minicalc-1)")
        try:
            meta = json.loads((folder / "task.json").read_text())
            problem = (folder / "problem.md").read_text()
        except (OSError, ValueError) as exc:
            raise TaskPackError(f"{folder.name}: cannot read task.json/problem.md ({exc})") from None
        repo = meta.get("repo", "")
        if repo != f"{match['owner']}/{match['name']}":
            raise TaskPackError(f"{folder.name}: repo {repo!r} does not match the instance id")
        if not meta.get("FAIL_TO_PASS"):
            raise TaskPackError(f"{folder.name}: FAIL_TO_PASS is empty; a task needs at least one failing test")
        for sub in ("gold", "test"):
            if not (folder / sub).is_dir():
                raise TaskPackError(f"{folder.name}: missing {sub}/ with the changed files")
        sources.append(
            TaskSource(
                folder.name,
                repo,
                meta["created_at"],
                meta.get("kind", ""),
                meta.get("difficulty", ""),
                tuple(meta["FAIL_TO_PASS"]),
                tuple(meta.get("PASS_TO_PASS", [])),
                problem,
                folder,
            )
        )
    if not sources:
        raise TaskPackError(f"no task folders under {src_dir}")
    return sources


def diff_against_base(repo_name: str, overlay: Path) -> str:
    """The ``git diff`` that turns the base repository into base + the files under ``overlay``."""
    with tempfile.TemporaryDirectory(prefix="qwen-swe-diff-") as tmp:
        work = Path(tmp) / "repo"
        make_repo(repo_name, work)
        copy_files(overlay, work)
        git(work, "add", "-A")
        patch = git(work, "diff", "--cached", "--no-color", "--no-ext-diff", "--no-renames")
    if not patch.strip():
        raise TaskPackError(f"{overlay} does not change repository {repo_name}: edit the files it holds")
    return patch


def patch_files(patch: str) -> list[str]:
    """Paths a diff touches, in order (from its ``diff --git a/X b/X`` headers)."""
    return re.findall(r"^diff --git a/(\S+) b/", patch, flags=re.M)


def eval_script(base_commit: str, test_patch: str, test_files: list[str] | None = None) -> str:
    """The row's ``eval_script``, in the shape swebench 4.x generates for pytest repositories.

    ``test_files`` default to the files the test patch touches; with an empty test patch (generated tasks,
    whose tests are in the repository) only the reset to ``base_commit`` guards them against the agent's edits.
    """
    files = " ".join(test_files or patch_files(test_patch))
    reset = f"git checkout {base_commit} -- {files}"
    apply = [f"git apply -v - <<'{HEREDOC}'\n{test_patch}{HEREDOC}"] if test_patch else []
    lines = [
        "#!/bin/bash",
        "set -uxo pipefail",
        "cd /testbed",
        "git config --global --add safe.directory /testbed",
        "git status",
        f"git -c core.fileMode=false diff {base_commit}",
        reset,
        *apply,
        f": '{START_TEST_OUTPUT}'",
        f"python3 -m pytest -rA {files}",
        f": '{END_TEST_OUTPUT}'",
        reset,
    ]
    return "\n".join(lines) + "\n"


def build_row(task: TaskSource, base_commit: str) -> dict[str, Any]:
    """One SWE-bench row (classic columns plus swebench 5.x's image/eval_script/log_parser/eval_type)."""
    patch = diff_against_base(task.repo_name, task.folder / "gold")
    test_patch = diff_against_base(task.repo_name, task.folder / "test")
    test_files = patch_files(test_patch)
    wrong = [p for p in patch_files(patch) if is_test_path(p)] + [p for p in test_files if not is_test_path(p)]
    if wrong:
        raise TaskPackError(
            f"{task.instance_id}: gold/ must hold source files and test/ test files; misplaced: {', '.join(wrong)}"
        )
    for test in task.fail_to_pass + task.pass_to_pass:
        if test.split("::", 1)[0] not in test_files:
            raise TaskPackError(
                f"{task.instance_id}: {test} is not in a file the test patch touches "
                f"({', '.join(test_files)}), so the eval script would not run it"
            )
    return {
        "repo": task.repo,
        "instance_id": task.instance_id,
        "base_commit": base_commit,
        "patch": patch,
        "test_patch": test_patch,
        "problem_statement": task.problem_statement,
        "hints_text": "",
        "created_at": task.created_at,
        "version": VERSION,
        "FAIL_TO_PASS": json.dumps(list(task.fail_to_pass)),
        "PASS_TO_PASS": json.dumps(list(task.pass_to_pass)),
        "environment_setup_commit": base_commit,
        "difficulty": task.difficulty,
        "image": image_name(task.instance_id),
        "eval_script": eval_script(base_commit, test_patch),
        "log_parser": "parse_log_pytest",
        "eval_type": "pass_and_fail",
    }


def base_commit_of(repo_name: str) -> str:
    with tempfile.TemporaryDirectory(prefix="qwen-swe-base-") as tmp:
        return make_repo(repo_name, Path(tmp) / "repo")


def build_rows(src_dir: Path = SRC_DIR) -> list[dict[str, Any]]:
    bases: dict[str, str] = {}
    rows = []
    for task in load_sources(src_dir):
        if task.repo_name not in bases:
            bases[task.repo_name] = base_commit_of(task.repo_name)
        rows.append(build_row(task, bases[task.repo_name]))
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def generate(path: Path = TASKS_JSONL, src_dir: Path = SRC_DIR) -> list[dict[str, Any]]:
    """Write ``tasks.jsonl`` from the sources; the same sources give the same bytes on every machine."""
    rows = build_rows(src_dir)
    path.write_text(render(rows))
    return rows


def load_rows(path: Path = TASKS_JSONL) -> list[dict[str, Any]]:
    """The rows of a tasks.jsonl as stored (FAIL_TO_PASS/PASS_TO_PASS stay JSON strings, as in SWE-bench)."""
    if not path.is_file():
        raise TaskPackError(f"{path} does not exist: run `python -m qwen_swe.data.taskpack generate`")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                raise TaskPackError(f"{path}:{number} is not valid JSON ({exc}); regenerate it") from None
    return rows


def careless_patch(instance_id: str, src_dir: Path = SRC_DIR) -> str | None:
    """The task's deliberately careless fix as a diff, or None when the task has none."""
    folder = src_dir / instance_id
    if not (folder / "careless").is_dir():
        return None
    match = ID_RE.fullmatch(instance_id)
    if match is None:
        raise TaskPackError(f"{instance_id!r} is not an instance id of the form owner__repo-N")
    return diff_against_base(match["name"], folder / "careless")
