"""Grade a model patch the way SWE-bench does, in a fresh container, and turn the verdict into a reward.

Flow of one grade (mirrors swebench 4.1.0 ``run_instance``): a new sandbox from the instance image, with no
network unless GRADE_NETWORK says otherwise (never the rollout container, so nothing the agent left behind can
influence the tests); the patch, minus its test-tampering parts (rule in ``grading``), written to
``/tmp/patch.diff`` and applied with swebench's own ladder (``git apply --verbose``, ``git apply --verbose
--reject``, ``patch --batch --fuzz=5 -p1 -i``, as 4.1.0 runs them); the eval script run under the eval timeout,
with the tamper witness (``audit``) on PYTHONPATH; the log, without the witness's records, judged by swebench's
parser and grading functions.

Outcomes:
- ``graded`` with +1 (resolved) or -1 (not): empty patch (no container), a patch that only touched tests, a patch
  that does not apply, failing tests, a tamper finding (``reward_hack_suspected``: ``tamper`` or ``audit``).
- ``aborted`` with a reason and reward 0.0 for infrastructure failures: image missing, daemon error, container
  crash, eval timeout, a log without the test markers, an instance that cannot be graded. The caller drops such a
  sample instead of training on it.

The machine comes from a ``SandboxFactory`` (default: Docker containers with the sandbox section's limits), so the
grader holds no engine client and runs on any backend of ``qwen_swe.sandbox.base``.

Each grade writes its own folder ``<log_dir>/<instance_id>/<grade id>/`` (patch, eval script, test output,
grade.json) and shares no log file, so concurrent grades of one instance never mix their logs.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from qwen_swe.errors import SandboxError
from qwen_swe.paths import TESTBED
from qwen_swe.reward import audit, tamper
from qwen_swe.reward import scoring as grading
from qwen_swe.reward.settings import RewardSettings
from qwen_swe.sandbox.base import Sandbox, SandboxFactory, SandboxRequest
from qwen_swe.sandbox.factory import DockerSandboxes
from qwen_swe.sandbox.settings import SandboxSettings

PATCH_PATH = "/tmp/patch.diff"
EVAL_PATH = "/eval.sh"
EVAL_OUTPUT_LIMIT = 64 << 20  # an eval log is parsed, so it must not be cut; larger is an aborted grade
APPLY_TIMEOUT = 300.0
MODES = ("binary", "fractional", "shaped")
DEFAULT_RUN_ID = "qwen-swe-grade"  # the container label of a grade outside a run
log = logging.getLogger(__name__)


class GradeStatus(str, Enum):
    GRADED = "graded"  # the verdict is the model's: +1 or -1 (or a mode's value)
    ABORTED = "aborted"  # infrastructure failed: the sample is dropped, never scored


@dataclass
class Grade:
    reward: float
    resolved: bool
    status: GradeStatus
    reason: str | None
    f2p_passed: float
    p2p_passed: float
    details: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def aborted(self) -> bool:
        return self.status == GradeStatus.ABORTED


@dataclass(frozen=True)
class Bench:
    """Where grades run, the same for every grade of a caller: the machines, their label, network and time limit,
    and the folder that gets one sub-folder per grade."""

    sandboxes: SandboxFactory
    run_id: str
    log_root: Path
    eval_timeout: float
    network: str = "none"


@dataclass
class Record:
    """One grade in progress: its row, what it has found (``details``, written to grade.json) and its phase times."""

    instance: dict
    details: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)
    folder: Path = Path()  # the grade's own log folder, made when a machine is about to run

    def failed(self, reason: str) -> Grade:
        return self.verdict(-1.0, GradeStatus.GRADED, reason)

    def aborted(self, reason: str) -> Grade:
        return self.verdict(0.0, GradeStatus.ABORTED, reason)

    def verdict(
        self,
        reward: float,
        status: GradeStatus,
        reason: str | None,
        resolved: bool = False,
        f2p: float = 0.0,
        p2p: float = 0.0,
    ) -> Grade:
        return Grade(
            reward=reward,
            resolved=resolved,
            status=status,
            reason=reason,
            f2p_passed=f2p,
            p2p_passed=p2p,
            details=self.details,
            timings=self.timings,
        )

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        """Record the phase's seconds when it finishes; a phase that raises is not timed."""
        t = time.monotonic()
        yield
        self.timings[phase] = time.monotonic() - t


def _log_root(log_dir: Path | None) -> Path:
    return Path(log_dir) if log_dir else Path(tempfile.gettempdir()) / "qwen_swe_grades"


def _new_folder(root: Path, instance: dict) -> Path:
    """``<root>/<instance_id>/<time>-<random>``: one per grade, so concurrent grades of an instance never share one."""
    folder = root / str(instance["instance_id"]) / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _pytest_based(instance: dict) -> bool:
    """The eval runs pytest, so pytest can write the trusted report (other runners keep the log alone)."""
    try:
        return "pytest" in grading.parser_for(instance).__name__
    except grading.GradingError:
        return False


async def _read_optional(box: Sandbox, path: str) -> str | None:
    try:
        return (await box.read_file(path)).decode("utf-8", "replace")
    except SandboxError:
        return None


async def grade_async(
    instance: dict,
    patch: str,
    *,
    reward: RewardSettings | None = None,
    sandbox: SandboxSettings | None = None,
    run_id: str = DEFAULT_RUN_ID,
    mode: str | None = None,
    agent_stats: dict | None = None,
    log_dir: Path | None = None,
    sandboxes: SandboxFactory | None = None,
    witness: bool = True,
) -> Grade:
    """Grade ``patch`` for ``instance`` (a SWE-bench row) in a fresh sandbox; see the module docstring.

    ``reward`` and ``sandbox`` are the grader's settings sections (default: the seed's values); ``mode`` defaults to
    ``reward.reward_mode``; ``run_id`` labels the container so the run's ``reap`` finds it; ``agent_stats``
    (``response_tokens``, ``tool_calls``, ``completed``) feeds the shaped mode; ``sandboxes`` makes the machine
    (default: ``DockerSandboxes(sandbox)``; pass one to share a client or bound starts with other work);
    ``log_dir`` (default under the temp folder) gets one folder per grade; ``witness=False`` grades without the
    in-process witness (``audit``), for measuring what it costs.
    """
    reward, sandbox = reward or RewardSettings(), sandbox or SandboxSettings()
    mode = mode or reward.reward_mode
    if mode not in MODES:
        raise ValueError(f"reward mode {mode!r} is not one of {', '.join(MODES)}")
    t0 = time.monotonic()
    bench = Bench(
        sandboxes or DockerSandboxes(sandbox), run_id, _log_root(log_dir), reward.eval_timeout, reward.grade_network
    )
    rec = Record(instance, {"mode": mode, "instance_id": instance.get("instance_id")})
    grade = await _grade(bench, rec, patch or "", witness)
    rec.timings["total"] = time.monotonic() - t0
    if grade.status == GradeStatus.GRADED and mode != "binary":
        _apply_mode(grade, mode, instance, rec.details.get("kept_files", set()), agent_stats, reward)
    rec.details.pop("kept_files", None)
    if "log_dir" in rec.details:
        Path(rec.details["log_dir"], "grade.json").write_text(json.dumps(asdict(grade), indent=2, default=str) + "\n")
    return grade


def grade(instance: dict, patch: str, **kw: Any) -> Grade:
    """Synchronous ``grade_async`` (for scripts and slime's custom reward hook)."""
    return asyncio.run(grade_async(instance, patch, **kw))


def _apply_mode(
    g: Grade, mode: str, instance: dict, kept: set[str], agent_stats: dict | None, settings: RewardSettings
) -> None:
    if mode == "fractional":
        g.reward = 1.0 if g.resolved else grading.fractional_reward(g.f2p_passed)
        g.details["components"] = {"f2p": g.f2p_passed}
    elif mode == "shaped":  # every graded outcome: an empty or unappliable patch changed no file
        gold = grading.patch_files(instance.get("patch") or "")
        changed = kept if g.details.get("applied") else set()
        g.reward, comps = grading.shaped_reward(g.resolved, changed, gold, agent_stats, settings)
        g.details["components"] = vars(comps)


async def _grade(bench: Bench, rec: Record, patch: str, witness: bool) -> Grade:
    """The guards before any machine: empty patch, ungradable row, test-only patch, the static tamper scan."""
    instance, details = rec.instance, rec.details
    if not patch.strip():
        return rec.failed("empty patch")
    try:
        grading.eval_script(instance)
        grading.parser_for(instance)
    except grading.GradingError as exc:
        return rec.aborted(str(exc))
    kept, dropped = grading.filter_patch(patch, grading.patch_files(instance.get("test_patch") or ""))
    details.update(
        dropped=dropped, dropped_hunks=sum(d["hunks"] for d in dropped), kept_files=grading.patch_files(kept)
    )
    if not kept.strip():
        return rec.failed("the patch only changes tests or test configuration")
    if hits := tamper.scan(kept, instance):
        details["reward_hack"] = hits
        return rec.failed(f"reward_hack_suspected: {hits[0]}")
    witnessed = kept if witness and audit.applies(instance) else None
    return await _evaluate(bench, rec, kept, witnessed)


async def evaluate(
    instance: dict,
    patch: str = "",
    *,
    sandbox: SandboxSettings | None = None,
    eval_timeout: float = 1800.0,
    run_id: str = DEFAULT_RUN_ID,
    log_dir: Path | None = None,
    sandboxes: SandboxFactory | None = None,
) -> Grade:
    """Run the instance's eval in a fresh no-network sandbox after applying ``patch`` as it is (empty: the base
    commit) and judge the log with swebench's logic: the binary verdict plus ``details["status_map"]``.

    This is the grader without its guards (no test-file filtering, no empty-patch shortcut), for proving tasks.
    """
    rec = Record(instance, {"mode": "binary", "instance_id": instance.get("instance_id")})
    try:
        grading.parser_for(instance)
    except grading.GradingError as exc:
        return rec.aborted(str(exc))
    bench = Bench(sandboxes or DockerSandboxes(sandbox or SandboxSettings()), run_id, _log_root(log_dir), eval_timeout)
    return await _evaluate(bench, rec, patch, None)


async def _evaluate(bench: Bench, rec: Record, patch: str, witnessed: str | None) -> Grade:
    """The machine part: a fresh sandbox, apply, eval, judge; infrastructure failures abort.

    ``witnessed``: the patch whose added lines the in-process witness (``audit``) blames, or None for no witness.
    """
    instance, details = rec.instance, rec.details
    try:
        script = grading.eval_script(instance)
    except grading.GradingError as exc:
        return rec.aborted(str(exc))
    rec.folder = _new_folder(bench.log_root, instance)
    (rec.folder / "patch.diff").write_text(patch)
    (rec.folder / "eval.sh").write_text(script)
    details.update(log_dir=str(rec.folder), log_path=str(rec.folder / "test_output.txt"))
    if bench.network != "none":
        log.warning(
            "grading %s with network %r (GRADE_NETWORK): the code under test can reach out",
            instance.get("instance_id"),
            bench.network,
        )
        details["network"] = bench.network
    box = bench.sandboxes(
        SandboxRequest(
            instance,
            bench.run_id,
            "grade",
            network=bench.network,
            base_commit=instance.get("base_commit"),
            hide_future=False,
            output_limit=EVAL_OUTPUT_LIMIT,
        )
    )
    details["image"] = box.image
    try:
        with rec.timed("image"):
            await box.prepare()
        t = time.monotonic()
        async with box:
            rec.timings["start"] = time.monotonic() - t
            result = await _run_in(box, bench, rec, patch, script, witnessed)
            t = time.monotonic()
        rec.timings["remove"] = time.monotonic() - t
        return result
    except SandboxError as exc:
        return rec.aborted(str(exc))


async def _run_in(box: Sandbox, bench: Bench, rec: Record, patch: str, script: str, witnessed: str | None) -> Grade:
    if patch.strip():
        applied = await _apply(box, rec, patch)
        if applied is None:
            return rec.failed("the patch does not apply")
    return await _eval(box, bench, rec, script, witnessed)


async def _apply(box: Sandbox, rec: Record, patch: str) -> str | None:
    """swebench's apply ladder; the command that applied, or None."""
    with rec.timed("apply"):
        await box.write_file(PATCH_PATH, patch)
        attempts = []
        applied = None
        for cmd in grading.GIT_APPLY_CMDS:
            res = await box.exec(f"{cmd} {PATCH_PATH}", timeout=APPLY_TIMEOUT, workdir=TESTBED)
            if res.timed_out:
                raise SandboxError(f"`{cmd}` timed out after {APPLY_TIMEOUT:.0f}s in {box.image}")
            attempts.append(f"$ {cmd} {PATCH_PATH}\n(exit {res.exit_code})\n{res.output}")
            if res.exit_code == 0:
                applied = cmd
                break
        (rec.folder / "apply.log").write_text("\n".join(attempts))
    rec.details["apply_cmd"] = applied
    rec.details["applied"] = applied is not None
    return applied


async def _eval(box: Sandbox, bench: Bench, rec: Record, script: str, witnessed: str | None) -> Grade:
    """Run the eval script (with pytest's own report and the witness where they apply) and judge its log."""
    t = time.monotonic()
    await box.write_file(EVAL_PATH, script, mode=0o755)
    junit = f"/tmp/qwen-swe-{uuid.uuid4().hex}/report.xml"  # outside the repository, unknown to the patch
    trusted = _pytest_based(rec.instance)
    env = {"PYTEST_ADDOPTS": f"--junitxml={junit} -o junit_family=xunit1"} if trusted else None
    prefix = ""
    if witnessed is not None:
        site_dir = f"/tmp/qwen-swe-{uuid.uuid4().hex}"
        site, prefix = audit.setup(witnessed, site_dir, junit if trusted else None)
        await box.write_file(f"{site_dir}/{audit.FILE}", site)
    res = await box.exec(
        f"{prefix}mkdir -p {junit.rsplit('/', 1)[0]} && /bin/bash {EVAL_PATH}",
        timeout=bench.eval_timeout,
        workdir=TESTBED,
        env=env,
    )
    rec.timings["eval"] = time.monotonic() - t
    log_text, records = audit.split(res.output) if witnessed is not None else (res.output, [])
    (rec.folder / "test_output.txt").write_text(log_text)
    if records:
        (rec.folder / "audit.log").write_text("\n".join(records) + "\n")
    if witnessed is not None:
        rec.details["witness"] = audit.coverage(records)
    if res.timed_out:
        return rec.aborted(f"eval timed out after {bench.eval_timeout:.0f}s (EVAL_TIMEOUT)")
    if res.truncated:
        return rec.aborted(f"eval output exceeded {EVAL_OUTPUT_LIMIT} bytes; cannot be parsed")
    report = functools.partial(_read_optional, box, junit) if trusted else None
    return await _judge(rec, script, log_text, res.exit_code, records if witnessed is not None else None, report)


async def _judge(
    rec: Record,
    script: str,
    log_text: str,
    exit_code: int,
    records: list[str] | None,
    report: Callable[[], Awaitable[str | None]] | None,
) -> Grade:
    """swebench's verdict on the log, unless the witness's ``records`` (None: no witness) or pytest's own report
    (``report`` reads it, only when the verdict needs it; None: not a pytest eval) say the log cannot be trusted."""
    instance, details = rec.instance, rec.details
    with rec.timed("parse"):
        verdict = await asyncio.to_thread(grading.judge_log, instance, log_text, script)
    details.update(
        eval_exit_code=exit_code,
        resolution=verdict.resolution,
        tests_status=verdict.tests_status,
        status_map=verdict.status_map,
    )
    if records is not None and (seen := audit.findings(records)):
        details["reward_hack"] = seen
        return rec.failed(f"reward_hack_suspected: the patch's code, watched while the tests ran: {seen[0]}")
    if verdict.markers_missing:
        return rec.aborted(
            f"eval log lacks the test markers (exit {exit_code}): the eval script was killed or does not print them"
        )
    if not verdict.found:
        return rec.failed(f"eval failed: {verdict.problem}")
    if report is not None:
        disagreements = tamper.cross_check(verdict.status_map, grading.listed_tests(instance), await report())
        if disagreements:
            details["reward_hack"] = disagreements
            return rec.failed(f"reward_hack_suspected: the log and pytest's own report disagree: {disagreements[0]}")
    return rec.verdict(
        1.0 if verdict.resolved else -1.0,
        GradeStatus.GRADED,
        None if verdict.resolved else verdict.resolution,
        verdict.resolved,
        verdict.f2p,
        verdict.p2p,
    )
