"""Run a repository's tests with and without a mutation and judge the pair the way the grader will.

The test log is parsed with swebench's own ``parse_log_pytest`` and the same command the row's eval script runs
(``python -m pytest -rA <test files>``). A mutation becomes a task only when some tests fail with it
(FAIL_TO_PASS), every other test passes in both states (PASS_TO_PASS), and the clean repository passes all.
Each worker owns a private copy of the repository and restores the mutated file after every run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from swebench.harness.log_parsers.python import parse_log_pytest

from qwen_swe.data.generate.mutations import Mutation, apply_mutation
from qwen_swe.data.taskpack.repo import copy_files
from qwen_swe.errors import TaskPackError
from qwen_swe.reward.testfiles import is_test_path

PASSED = ("PASSED", "XFAIL")
TEST_TIMEOUT = 120


@dataclass(frozen=True)
class Verdict:
    mutation: Mutation
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    failure: str  # the first FAIL_TO_PASS test's failing line and error, for the problem statement
    reject: str = ""  # why it is not a task; empty when it is one
    frames: tuple[str, ...] = ()  # that failure's traceback through the project's own code, Python's format


def run_tests(repo: Path, test_files: list[str], python: str = sys.executable) -> tuple[dict[str, str], str]:
    """(status per test, log) of ``python -m pytest -rA --tb=short <test_files>`` in ``repo``."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [python, "-m", "pytest", "-rA", "--tb=short", "-p", "no:cacheprovider", *test_files]
    try:
        proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=TEST_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {}, f"timed out after {TEST_TIMEOUT} s"
    log = proc.stdout + proc.stderr
    return parse_log_pytest(log, None), log


FRAME = re.compile(r"^(\S+\.py):(\d+): in (\S+)$")


def failure_of(log: str, test: str) -> tuple[str, tuple[str, ...]]:
    """The failing statement and error lines of ``test`` in a ``--tb=short`` log (empty if not found), and the
    frames of that traceback in the project's code (not its tests) as Python prints them, two lines a frame."""
    name = test.split("::")[-1]
    match = re.search(rf"^_+ {re.escape(name)} _+$(.*?)(?=^_{{3,}} |^=+ )", log, flags=re.M | re.S)
    if not match:
        return "", ()
    code, errors, frames, frame = "", [], [], None
    for line in match.group(1).splitlines():
        if line.startswith("E   ") and len(errors) < 4:
            errors.append(line[4:].rstrip())
        elif (found := FRAME.match(line)) is not None:
            path, lineno, function = found.groups()
            ours = not (is_test_path(path) or path.startswith(("/", "..")))  # not the tests, not the interpreter's
            frame = f'  File "{path}", line {lineno}, in {function}' if ours else None
        elif line.startswith("    ") and not errors:
            if frame is not None and line.strip().strip("^~ "):
                frames += [frame, "    " + line.strip()]
                frame = None
            elif not code:
                code = line.strip()
    return "\n".join(([code] if code else []) + errors), tuple(frames)


def baseline(repo: Path, test_files: list[str]) -> dict[str, str]:
    statuses, log = run_tests(repo, test_files)
    broken = sorted(t for t, s in statuses.items() if s not in PASSED)
    if not statuses:
        raise TaskPackError(f"pytest found no tests in {', '.join(test_files)} of {repo}:\n{log[-1500:]}")
    if broken:
        raise TaskPackError(f"the clean repository {repo.name} fails tests ({', '.join(broken[:5])}): "
                            "generate tasks only from a repository whose tests pass")
    return statuses


def judge(mutation: Mutation, clean: dict[str, str], statuses: dict[str, str], log: str) -> Verdict:
    f2p = tuple(sorted(t for t in clean if statuses.get(t) not in PASSED))
    p2p = tuple(sorted(t for t in clean if statuses.get(t) in PASSED))
    extra = sorted(set(statuses) - set(clean))
    reject = ""
    if not statuses:
        reject = "the tests did not run (import error or timeout)"
    elif extra:
        reject = f"tests appear only with the bug: {', '.join(extra[:3])}"
    elif not f2p:
        reject = "no test fails with the bug"
    failure, frames = failure_of(log, f2p[0]) if f2p else ("", ())
    if f2p and not failure and not reject:
        reject = "no failure message to describe"
    return Verdict(mutation, f2p, p2p, failure, reject, frames)


def validate(source_repo: Path, mutations: Iterable[Mutation], test_files: list[str], jobs: int = 2,
             log: Callable[[str], None] = lambda _: None) -> list[Verdict]:
    """Judge every mutation of one repository (``jobs`` pytest runs at a time), in input order."""
    mutations = list(mutations)
    with tempfile.TemporaryDirectory(prefix="qwen-swe-gen-") as tmp:
        copies = []
        for i in range(max(1, jobs)):
            copy = Path(tmp) / f"w{i}" / source_repo.name
            copy_files(source_repo, copy)
            copies.append(copy)
        clean = baseline(copies[0], test_files)
        free = list(copies)

        def one(mutation: Mutation) -> Verdict:
            copy = free.pop()
            target = copy / mutation.path
            original = target.read_text()
            try:
                target.write_text(apply_mutation(original, mutation))
                statuses, output = run_tests(copy, test_files)
            finally:
                target.write_text(original)
                shutil.rmtree(copy / "__pycache__", ignore_errors=True)
                free.append(copy)
            return judge(mutation, clean, statuses, output)

        with ThreadPoolExecutor(max_workers=len(copies)) as pool:
            verdicts = list(pool.map(one, mutations))
    log(f"{source_repo.name}: {sum(not v.reject for v in verdicts)}/{len(verdicts)} mutations break a test")
    return verdicts
