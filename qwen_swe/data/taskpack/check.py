"""Prove every task in containers of its image, the way the grader will see it.

At ``base_commit`` the row's eval script must show every FAIL_TO_PASS test failing (or absent) and every
PASS_TO_PASS test passing; with the gold patch all of them pass and nothing else runs; a task's
``careless`` fix, when it has one, passes FAIL_TO_PASS but breaks PASS_TO_PASS. The log is parsed with
swebench's own pytest parser and judged with its own resolution rule, so a task that passes here is
graded the same way in a rollout.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from qwen_swe.data.taskpack import TaskPackError
from qwen_swe.data.taskpack.source import END_TEST_OUTPUT, START_TEST_OUTPUT, careless_patch

CHECK_LABELS = {"qwen-swe": "1", "qwen-swe.role": "check"}
EVAL_TIMEOUT = 300  # seconds, enforced inside the container by coreutils timeout
PASSED = ("PASSED", "XFAIL")


@dataclass
class TaskCheck:
    instance_id: str
    problems: list[str] = field(default_factory=list)
    runs: dict[str, dict[str, str]] = field(default_factory=dict)  # run name -> test -> status
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems


def _archive(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def run_eval(client: Any, image: str, script: str, patch: str | None = None) -> str:
    """Run ``script`` in a fresh no-network container of ``image`` (after ``git apply`` of ``patch``); the log.

    The log is stdout and stderr merged, as swebench records it (the markers come from ``set -x``).
    """
    container = client.containers.create(image, command=["sleep", "infinity"], network_mode="none",
                                          labels=CHECK_LABELS, working_dir="/testbed")
    try:
        container.start()
        files = {"eval.sh": script, **({"patch.diff": patch} if patch is not None else {})}
        if not container.put_archive("/tmp", _archive(files)):
            raise TaskPackError(f"copying the eval script into a container of {image} failed")
        if patch is not None:
            code, out = container.exec_run(["timeout", "60", "git", "apply", "-v", "/tmp/patch.diff"],
                                           workdir="/testbed")
            if code != 0:
                raise TaskPackError(f"the patch does not apply in {image}: {out.decode(errors='replace')[-1500:]}")
        code, out = container.exec_run(["timeout", str(EVAL_TIMEOUT), "bash", "/tmp/eval.sh"], workdir="/testbed")
        log = out.decode(errors="replace")
        if code == 124:
            raise TaskPackError(f"the eval script timed out after {EVAL_TIMEOUT} s in {image}")
        return log
    finally:
        container.remove(force=True)


def parse_log(log: str) -> dict[str, str]:
    """Test statuses from the part of the log between swebench's markers, with swebench's pytest parser."""
    from swebench.harness.log_parsers.python import parse_log_pytest

    if START_TEST_OUTPUT not in log or END_TEST_OUTPUT not in log:
        raise TaskPackError("the eval log lacks the start/end test output markers; the eval script did not run "
                            "to the end")
    section = log.split(START_TEST_OUTPUT, 1)[1].split(END_TEST_OUTPUT, 1)[0]
    # parse_log_pytest takes a TestSpec for the parsers that need one; the pytest parser never reads it.
    return parse_log_pytest(section, None)


def resolution(statuses: dict[str, str], f2p: list[str], p2p: list[str]) -> str:
    """swebench's verdict for these statuses: RESOLVED_FULL, RESOLVED_PARTIAL or RESOLVED_NO."""
    from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS, EvalType
    from swebench.harness.grading import get_eval_tests_report, get_resolution_status

    report = get_eval_tests_report(statuses, {FAIL_TO_PASS: f2p, PASS_TO_PASS: p2p}, eval_type=EvalType.PASS_AND_FAIL)
    return get_resolution_status(report)


def _not_passing(tests: list[str], statuses: dict[str, str]) -> list[str]:
    return [f"{t} ({statuses.get(t, 'absent')})" for t in tests if statuses.get(t) not in PASSED]


def check_task(client: Any, row: dict[str, Any]) -> TaskCheck:
    """All checks of one task; problems are collected, not raised, so one report covers the whole pack."""
    result = TaskCheck(row["instance_id"])
    start = time.monotonic()
    f2p, p2p = json.loads(row["FAIL_TO_PASS"]), json.loads(row["PASS_TO_PASS"])
    image, script = row["image"], row["eval_script"]
    try:
        base = result.runs["base"] = parse_log(run_eval(client, image, script))
        passing_f2p = [t for t in f2p if base.get(t) in PASSED]
        if passing_f2p:
            result.problems.append(f"at base_commit these FAIL_TO_PASS tests already pass: {', '.join(passing_f2p)}")
        broken = _not_passing(p2p, base)
        if broken:
            result.problems.append(f"at base_commit these PASS_TO_PASS tests do not pass: {', '.join(broken)}")

        gold = result.runs["gold"] = parse_log(run_eval(client, image, script, row["patch"]))
        broken = _not_passing(f2p + p2p, gold)
        if broken:
            result.problems.append(f"with the gold patch these tests do not pass: {', '.join(broken)}")
        unlisted = sorted(set(gold) - set(f2p) - set(p2p))
        if unlisted:
            result.problems.append(f"the eval script runs tests listed in neither FAIL_TO_PASS nor PASS_TO_PASS: "
                                   f"{', '.join(unlisted)}")
        if resolution(gold, f2p, p2p) != "RESOLVED_FULL":
            result.problems.append("swebench does not grade the gold patch as RESOLVED_FULL")

        careless = careless_patch(row["instance_id"])
        if careless is not None:
            sloppy = result.runs["careless"] = parse_log(run_eval(client, image, script, careless))
            if _not_passing(f2p, sloppy):
                result.problems.append(f"the careless fix should pass FAIL_TO_PASS but does not: "
                                       f"{', '.join(_not_passing(f2p, sloppy))}")
            if not _not_passing(p2p, sloppy):
                result.problems.append("the careless fix should break a PASS_TO_PASS test but breaks none")
            if resolution(sloppy, f2p, p2p) == "RESOLVED_FULL":
                result.problems.append("swebench grades the careless fix as resolved")
    except TaskPackError as exc:
        result.problems.append(str(exc))
    except Exception as exc:  # noqa: BLE001 - a Docker failure is one task's problem, reported with the rest
        result.problems.append(f"{exc.__class__.__name__}: {exc}")
    result.seconds = time.monotonic() - start
    return result


def check_all(rows: list[dict[str, Any]], client: Any, jobs: int = 2,
              log: Callable[[str], None] = print) -> list[TaskCheck]:
    """Check every row (``jobs`` tasks at a time); results come back in row order."""

    def one(row: dict[str, Any]) -> TaskCheck:
        result = check_task(client, row)
        log(f"{'ok' if result.ok else 'FAILED':>6}  {result.seconds:5.1f} s  {result.instance_id}")
        return result

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, rows))


def format_report(results: list[TaskCheck]) -> str:
    lines = []
    for result in results:
        runs = ", ".join(f"{name}: {sum(s in PASSED for s in statuses.values())}/{len(statuses)} pass"
                         for name, statuses in result.runs.items())
        lines.append(f"{'ok' if result.ok else 'FAILED':>6}  {result.instance_id}  ({runs})")
        lines.extend(f"        - {problem}" for problem in result.problems)
    failed = sum(not r.ok for r in results)
    lines.append(f"{len(results) - failed}/{len(results)} tasks pass the check")
    return "\n".join(lines)
