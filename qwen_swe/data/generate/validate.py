"""Run a repository's tests with and without a mutation and judge the pair the way the grader will.

The test log is parsed with swebench's own ``parse_log_pytest`` and the same command the row's eval script runs
(``python -m pytest -rA <test files>``). A mutation becomes a task only when some tests fail with it
(FAIL_TO_PASS), every other test passes in both states (PASS_TO_PASS), and the clean repository passes all.
Each worker owns a private copy of the repository and restores the mutated file after every run.

A verdict depends only on the repository's files, the mutations, the test files, the interpreter and this code,
never on the seed: with a ``cache`` folder, the verdicts of one repository are kept under a digest of all of those
and reused by any later run with the same inputs (another seed, ``--localized``, the learning benchmark).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from swebench.harness.log_parsers.python import parse_log_pytest

from qwen_swe.data.generate.mutations import Mutation, apply_mutation
from qwen_swe.data.taskpack.repo import copy_files, tree_files
from qwen_swe.errors import TaskPackError
from qwen_swe.reward.testfiles import is_test_path

PASSED = ("PASSED", "XFAIL")
TEST_TIMEOUT = 120
TIMED_OUT = "the tests timed out"  # may pass on a less busy machine: such verdicts are never cached


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
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def failure_of(log: str, test: str) -> tuple[str, tuple[str, ...]]:
    """The failing statement and error lines of ``test`` in a ``--tb=short`` log (empty if not found), and the
    frames of that traceback in the project's code (not its tests) as Python prints them, two lines a frame."""
    name = test.split("::")[-1]
    match = re.search(rf"^_+ {re.escape(name)} _+$(.*?)(?=^_{{3,}} |^=+ )", log, flags=re.M | re.S)
    if not match:
        return "", ()
    code, frames, frame = "", [], None
    errors: list[str] = []
    for line in match.group(1).splitlines():
        if line.startswith("E   ") and len(errors) < 4:
            errors.append(ADDRESS.sub(" at 0x...", line[4:].rstrip()))  # reprs' addresses differ per run
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
        raise TaskPackError(
            f"the clean repository {repo.name} fails tests ({', '.join(broken[:5])}): "
            "generate tasks only from a repository whose tests pass"
        )
    return statuses


def judge(mutation: Mutation, clean: dict[str, str], statuses: dict[str, str], log: str) -> Verdict:
    f2p = tuple(sorted(t for t in clean if statuses.get(t) not in PASSED))
    p2p = tuple(sorted(t for t in clean if statuses.get(t) in PASSED))
    extra = sorted(set(statuses) - set(clean))
    reject = ""
    if not statuses:
        reject = TIMED_OUT if log.startswith("timed out after") else "the tests did not run (import error)"
    elif extra:
        reject = f"tests appear only with the bug: {', '.join(extra[:3])}"
    elif not f2p:
        reject = "no test fails with the bug"
    failure, frames = failure_of(log, f2p[0]) if f2p else ("", ())
    if f2p and not failure and not reject:
        reject = "no failure message to describe"
    return Verdict(mutation, f2p, p2p, failure, reject, frames)


def cache_key(source_repo: Path, mutations: list[Mutation], test_files: list[str]) -> str:
    """A digest of everything a repository's verdicts depend on."""
    versions = [sys.version, metadata.version("pytest"), metadata.version("swebench")]  # the runner and the parser
    h = hashlib.sha256(json.dumps([versions, TEST_TIMEOUT, test_files, [asdict(m) for m in mutations]]).encode())
    h.update(Path(__file__).read_bytes())
    for path in tree_files(source_repo):
        h.update(path.relative_to(source_repo).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:20]


def _load(path: Path, mutations: list[Mutation]) -> list[Verdict] | None:
    try:
        rows = json.loads(path.read_text())
        verdicts = [
            Verdict(
                **{
                    **r,
                    "mutation": Mutation(**r["mutation"]),
                    "fail_to_pass": tuple(r["fail_to_pass"]),
                    "pass_to_pass": tuple(r["pass_to_pass"]),
                    "frames": tuple(r["frames"]),
                }
            )
            for r in rows
        ]
    except (OSError, ValueError, TypeError, KeyError):
        return None  # absent or unreadable: judge again
    return verdicts if [v.mutation for v in verdicts] == mutations else None


def validate(
    source_repo: Path,
    mutations: Iterable[Mutation],
    test_files: list[str],
    jobs: int = 2,
    log: Callable[[str], None] = lambda _: None,
    cache: Path | None = None,
    judged: Callable[[int], None] = lambda _: None,
) -> list[Verdict]:
    """Judge every mutation of one repository (``jobs`` pytest runs at a time), in input order; with ``cache``,
    reuse the verdicts an earlier run judged from the same inputs, and keep new ones there. ``judged(n)`` is told
    as verdicts are reached, for the progress display."""
    mutations = list(mutations)
    stored = cache / f"{source_repo.name}-{cache_key(source_repo, mutations, test_files)}.json" if cache else None
    if stored and (verdicts := _load(stored, mutations)) is not None:
        judged(len(verdicts))
        log(
            f"{source_repo.name}: {sum(not v.reject for v in verdicts)}/{len(verdicts)} mutations break a test "
            f"(verdicts reused from {stored})"
        )
        return verdicts
    verdicts = _judge_all(source_repo, mutations, test_files, jobs, judged)
    log(f"{source_repo.name}: {sum(not v.reject for v in verdicts)}/{len(verdicts)} mutations break a test")
    if stored and not any(v.reject == TIMED_OUT for v in verdicts):
        stored.parent.mkdir(parents=True, exist_ok=True)
        partial = stored.with_suffix(f".tmp{os.getpid()}")
        partial.write_text(json.dumps([asdict(v) for v in verdicts]))
        partial.replace(stored)  # atomic: a concurrent or killed run never leaves half a file
        for older in set(stored.parent.glob(f"{source_repo.name}-*.json")) - {stored}:
            older.unlink(missing_ok=True)  # one entry per repository: the cache does not grow with every change
    return verdicts


def _judge_all(
    source_repo: Path, mutations: list[Mutation], test_files: list[str], jobs: int, judged: Callable[[int], None]
) -> list[Verdict]:
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
            judged(1)
            return judge(mutation, clean, statuses, output)

        with ThreadPoolExecutor(max_workers=len(copies)) as pool:
            return list(pool.map(one, mutations))
