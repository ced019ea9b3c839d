"""Generated tasks -> SWE-bench rows, split into train and held-out by bug site, deterministically from a seed.

Layout of a generated task (SWE-smith's, one image per repository): the repository's image holds ``/testbed``
with the clean commit on ``main`` and one *root* commit per task under ``refs/tasks/<instance_id>`` whose tree is
the buggy state; the row's ``base_commit`` is that commit. The sandbox checks it out at start and the rollout's
hide-the-future step drops every other ref and prunes the clean commit, so the agent sees one commit, the bug,
and no history. Identity and dates are fixed (``repo.IDENTITY``), so the same bug gives the same sha everywhere.
The tests stay in the repository (the agent may run them); the eval script resets them to ``base_commit`` before
it runs them, so editing a test never helps.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from qwen_swe.data.generate.mutations import Mutation, apply_mutation, mutations_of
from qwen_swe.data.generate.validate import Verdict, validate
from qwen_swe.data.taskpack import REPOS_DIR
from qwen_swe.data.taskpack.repo import git, make_repo
from qwen_swe.data.taskpack.source import eval_script
from qwen_swe.errors import TaskPackError
from qwen_swe.progress import Meter, show
from qwen_swe.reward.testfiles import is_test_path

OWNER = "qwengen"
VERSION = "gen-1"
TASK_REF = "refs/tasks/"
CREATED_AT = "2025-01-01T00:00:00Z"
SKIP_FILES = {"setup.py", "conftest.py", "noxfile.py"}
NOT_LOCALIZED = "the traceback does not pass through the faulty line"


@dataclass(frozen=True)
class Task:
    row: dict[str, Any]
    mutation: Mutation
    split: str  # "train" | "heldout"


def shipped_repos() -> list[Path]:
    return sorted(p for p in REPOS_DIR.iterdir() if p.is_dir())


def repo_files(folder: Path) -> tuple[list[str], list[str]]:
    """(source files to mutate, test files to run) of a repository folder, repository-relative."""
    files = sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*.py")
        if not {"__pycache__", ".git", ".venv"} & set(p.relative_to(folder).parts)
    )
    tests = [f for f in files if is_test_path(f) and Path(f).name.startswith("test")]
    sources = [f for f in files if not is_test_path(f) and Path(f).name not in SKIP_FILES]
    if not tests:
        raise TaskPackError(f"{folder}: no test files (tests/test_*.py); the generator needs tests that pass")
    return sources, tests


def repo_mutations(folder: Path) -> tuple[list[Mutation], list[str]]:
    """(every mutation of the repository's source files, its test files): what its verdicts are judged over, the
    same for every seed."""
    sources, tests = repo_files(folder)
    return [m for f in sources for m in mutations_of((folder / f).read_text(), f)], tests


def instance_id(repo_name: str, mutation: Mutation) -> str:
    """``qwengen__<repo>-<n>``: ``n`` is a hash of the bug, so an id names the same bug in every generation."""
    key = f"{repo_name}\0{mutation.path}\0{mutation.lineno}\0{mutation.new}"
    return f"{OWNER}__{repo_name}-{int(hashlib.sha256(key.encode()).hexdigest()[:7], 16)}"


def problem_statement(repo_name: str, verdict: Verdict, test_source: str = "") -> str:
    """The symptom, in an issue's words: a reproduction (the failing check with the imports it needs, as a
    reporter would paste it) and its error, with the traceback through the project's code when the error is an
    exception raised there (as a reporter would paste it too); never the fix."""
    code, *errors = verdict.failure.splitlines() or [""]
    names = set(re.findall(r"[A-Za-z_]\w*", code))
    imports = [
        line
        for line in test_source.splitlines()
        if line.startswith(("from ", "import "))
        and names & set(re.findall(r"[A-Za-z_]\w*", line.split(" import ", 1)[-1]))
    ]
    shown = code if len(code) <= 70 else code[:67] + "..."
    others = len(verdict.fail_to_pass) - 1
    text = [
        f"{repo_name}: `{shown}` fails",
        "",
        "This check fails on the current code:",
        "",
        "```python",
        *imports,
        code,
        "```",
        "",
    ]
    if errors:
        trace = ["Traceback (most recent call last):", *verdict.frames] if verdict.frames else []
        text += ["It fails with:", "", "```", *trace, *errors, "```", ""]
    text.append(
        "It should pass."
        + (f" {others} other check{'s' if others > 1 else ''} of the project fail the same way." if others else "")
    )
    return "\n".join(text) + "\n"


def split_sites(sites: Sequence[str], seed: int, heldout_fraction: float) -> set[str]:
    """The held-out bug sites: a seeded shuffle of the sorted sites, the first ``heldout_fraction`` of them."""
    order = sorted(set(sites))
    random.Random(f"sites-{seed}").shuffle(order)
    return set(order[: max(1, round(len(order) * heldout_fraction))]) if order else set()


def image_name(repo_name: str, clean: str, bases: Sequence[str]) -> str:
    digest = hashlib.sha256("\0".join([clean, *sorted(bases)]).encode()).hexdigest()[:12]
    return f"qwen-swe/gen.{repo_name}:{digest}"


def commit_bug(work: Path, mutation: Mutation, instance: str) -> str:
    """A root commit of the repository with ``mutation`` applied, under ``refs/tasks/<instance>``; its sha."""
    target = work / mutation.path
    original = target.read_text()
    target.write_text(apply_mutation(original, mutation))
    try:
        git(work, "add", mutation.path)
        tree = git(work, "write-tree").strip()
        sha = git(work, "commit-tree", tree, "-m", f"{work.name}: base state").strip()
    finally:
        target.write_text(original)
        git(work, "add", mutation.path)
    git(work, "update-ref", TASK_REF + instance, sha)
    return sha


def build_row(
    repo_name: str,
    mutation: Mutation,
    verdict: Verdict,
    base: str,
    clean: str,
    image: str,
    test_files: list[str],
    patch: str,
    test_source: str,
) -> dict[str, Any]:
    return {
        "repo": f"{OWNER}/{repo_name}",
        "instance_id": instance_id(repo_name, mutation),
        "base_commit": base,
        "patch": patch,
        "test_patch": "",
        "problem_statement": problem_statement(repo_name, verdict, test_source),
        "hints_text": "",
        "created_at": CREATED_AT,
        "version": VERSION,
        "FAIL_TO_PASS": json.dumps(list(verdict.fail_to_pass)),
        "PASS_TO_PASS": json.dumps(list(verdict.pass_to_pass)),
        "environment_setup_commit": clean,
        "difficulty": mutation.kind,
        "image": image,
        "eval_script": eval_script(base, "", test_files),
        "log_parser": "parse_log_pytest",
        "eval_type": "pass_and_fail",
        "bug_site": mutation.site,
    }


@dataclass
class Generation:
    tasks: list[Task]
    rejects: dict[str, int]
    testbeds: dict[str, Path]  # repository name -> the folder to copy into its image's /testbed
    images: dict[str, str]


def passes_through(verdict: Verdict) -> bool:
    """Whether the failure's traceback shows the faulty line (a frame at the mutated file and line)."""
    where = f'File "{verdict.mutation.path}", line {verdict.mutation.lineno},'
    return any(where in frame for frame in verdict.frames)


def generate(
    repos: Sequence[Path],
    seed: int,
    count: int,
    heldout_fraction: float,
    workdir: Path,
    jobs: int = 2,
    log: Callable[[str], None] = print,
    localized: bool = False,
    cache: Path | None = None,
) -> Generation:
    """Mutate, validate, split and commit: the tasks of every repository, ``count`` at most in all. ``localized``
    keeps only the bugs whose failure's traceback passes through the faulty line (the symptom points at it);
    ``cache`` is validate's verdict cache."""
    if not 0 < heldout_fraction < 1:
        raise TaskPackError(f"heldout fraction must be between 0 and 1, got {heldout_fraction}")
    valid: list[tuple[str, Verdict]] = []
    rejects: dict[str, int] = {}
    test_files_of: dict[str, list[str]] = {}
    mutations_of_repo: dict[Path, list[Mutation]] = {}
    for folder in repos:
        mutations_of_repo[folder], test_files_of[_repo_name(folder)] = repo_mutations(folder)
    meter = Meter(total=sum(len(m) for m in mutations_of_repo.values()))
    with show(meter, "generate: judging mutations", unit="mutations"):
        for folder, mutations in mutations_of_repo.items():
            name = _repo_name(folder)
            for verdict in validate(
                folder, mutations, test_files_of[name], jobs=jobs, log=log, cache=cache, judged=meter.advance
            ):
                if not verdict.reject and localized and not passes_through(verdict):
                    verdict = replace(verdict, reject=NOT_LOCALIZED)
                if verdict.reject:
                    reason = verdict.reject.split(":")[0]
                    rejects[reason] = rejects.get(reason, 0) + 1
                else:
                    valid.append((name, verdict))
    random.Random(f"tasks-{seed}").shuffle(valid)
    chosen = sorted(valid[:count], key=lambda nv: instance_id(nv[0], nv[1].mutation))
    heldout = split_sites([f"{n}/{v.mutation.site}" for n, v in chosen], seed, heldout_fraction)
    return _commit_all(chosen, heldout, rejects, test_files_of, {_repo_name(f): f for f in repos}, workdir)


def _commit_all(
    chosen: list[tuple[str, Verdict]],
    heldout: set[str],
    rejects: dict[str, int],
    test_files_of: dict[str, list[str]],
    folders: dict[str, Path],
    workdir: Path,
) -> Generation:
    tasks: list[Task] = []
    testbeds: dict[str, Path] = {}
    images: dict[str, str] = {}
    for name in sorted({n for n, _ in chosen}):
        work = workdir / name
        clean = make_repo(name, work, folders[name])
        mine = [v for n, v in chosen if n == name]
        bases = [commit_bug(work, v.mutation, instance_id(name, v.mutation)) for v in mine]
        git(work, "checkout", "-q", "-f", "HEAD")
        image = image_name(name, clean, bases)
        testbeds[name], images[name] = work, image
        for verdict, base in zip(mine, bases):
            patch = git(work, "diff", "--no-color", "--no-ext-diff", base, clean, "--", verdict.mutation.path)
            test_source = (folders[name] / verdict.fail_to_pass[0].split("::")[0]).read_text()
            row = build_row(
                name, verdict.mutation, verdict, base, clean, image, test_files_of[name], patch, test_source
            )
            split = "heldout" if f"{name}/{verdict.mutation.site}" in heldout else "train"
            tasks.append(Task(row, verdict.mutation, split))
    tasks.sort(key=lambda t: t.row["instance_id"])
    return Generation(tasks, rejects, testbeds, images)


def _repo_name(folder: Path) -> str:
    name = re.sub(r"[^a-z0-9_]", "_", folder.resolve().name.lower())
    if not name:
        raise TaskPackError(f"{folder}: cannot name a repository after this folder")
    return name


def scratch() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="qwen-swe-generate-")
