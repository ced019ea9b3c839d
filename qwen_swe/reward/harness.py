"""Grade a model patch the way SWE-bench does, in a fresh container, and turn the verdict into a reward.

Flow of one grade (mirrors swebench 4.1.0 ``run_instance``): a new container from the instance image with no
network (never the rollout container, so nothing the agent left behind can influence the tests); the patch,
minus its test-tampering parts (rule in ``grading``), written to ``/tmp/patch.diff`` and applied with swebench's
own ladder (``git apply --verbose``, ``git apply --verbose --reject``, ``patch --batch --fuzz=5 -p1 -i``, as 4.1.0
runs them); the eval script run under the eval timeout, with the tamper witness (``audit``) on PYTHONPATH; the log,
without the witness's records, judged by swebench's parser and grading functions.

Outcomes:
- ``graded`` with +1 (resolved) or -1 (not): empty patch (no container), a patch that only touched tests, a patch
  that does not apply, failing tests, a tamper finding (``reward_hack_suspected``: ``tamper`` or ``audit``).
- ``aborted`` with a reason and reward 0.0 for infrastructure failures: image missing, daemon error, container
  crash, eval timeout, a log without the test markers, an instance that cannot be graded. The caller drops such a
  sample instead of training on it.

Each grade writes its own folder ``<log_dir>/<instance_id>/<grade id>/`` (patch, eval script, test output,
grade.json) and uses no shared logger, so concurrent grades of one instance never mix their logs.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import docker

from qwen_swe.paths import TESTBED
from qwen_swe.reward import audit, tamper
from qwen_swe.reward import scoring as grading
from qwen_swe.reward.settings import RewardSettings
from qwen_swe.sandbox.docker import DockerSandbox, SandboxError, docker_client, ensure_image, image_for
from qwen_swe.sandbox.settings import SandboxSettings

PATCH_PATH = "/tmp/patch.diff"
EVAL_PATH = "/eval.sh"
EVAL_OUTPUT_LIMIT = 64 << 20   # an eval log is parsed, so it must not be cut; larger is an aborted grade
APPLY_TIMEOUT = 300.0
MODES = ("binary", "fractional", "shaped")
DEFAULT_RUN_ID = "qwen-swe-grade"  # the container label of a grade outside a run


class GradeStatus(str, Enum):
    GRADED = "graded"    # the verdict is the model's: +1 or -1 (or a mode's value)
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


def _aborted(reason: str, details: dict[str, Any], timings: dict[str, float]) -> Grade:
    return Grade(0.0, False, GradeStatus.ABORTED, reason, 0.0, 0.0, details, timings)


def _pytest_based(instance: dict) -> bool:
    """The eval runs pytest, so pytest can write the trusted report (other runners keep the log alone)."""
    try:
        return "pytest" in grading.parser_for(instance).__name__
    except grading.GradingError:
        return False


async def _read_optional(box: DockerSandbox, path: str) -> str | None:
    try:
        return (await box.read_file(path)).decode("utf-8", "replace")
    except SandboxError:
        return None


def _failed(reason: str, details: dict[str, Any], timings: dict[str, float]) -> Grade:
    return Grade(-1.0, False, GradeStatus.GRADED, reason, 0.0, 0.0, details, timings)


async def grade_async(instance: dict, patch: str, *, reward: RewardSettings | None = None,
                      sandbox: SandboxSettings | None = None, run_id: str = DEFAULT_RUN_ID, mode: str | None = None,
                      agent_stats: dict | None = None, log_dir: Path | None = None,
                      client: docker.DockerClient | None = None,
                      boot_limit: asyncio.Semaphore | None = None, witness: bool = True) -> Grade:
    """Grade ``patch`` for ``instance`` (a SWE-bench row) in a fresh container; see the module docstring.

    ``reward`` and ``sandbox`` are the grader's settings sections (default: the seed's values); ``mode`` defaults to
    ``reward.reward_mode``; ``run_id`` labels the container so the run's ``reap`` finds it; ``agent_stats``
    (``response_tokens``, ``tool_calls``, ``completed``) feeds the shaped mode; ``boot_limit`` bounds container
    starts shared with other work; ``log_dir`` (default under the temp folder) gets one folder per grade;
    ``witness=False`` grades without the in-process witness (``audit``), for measuring what it costs.
    """
    reward, sandbox = reward or RewardSettings(), sandbox or SandboxSettings()
    mode = mode or reward.reward_mode
    if mode not in MODES:
        raise ValueError(f"reward mode {mode!r} is not one of {', '.join(MODES)}")
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    details: dict[str, Any] = {"mode": mode, "instance_id": instance.get("instance_id")}
    log_root = Path(log_dir) if log_dir else Path(tempfile.gettempdir()) / "qwen_swe_grades"
    grade = await _grade(instance, patch or "", reward, sandbox, run_id, log_root, client, boot_limit, details,
                         timings, witness)
    timings["total"] = time.monotonic() - t0
    if grade.status == GradeStatus.GRADED and mode != "binary":
        _apply_mode(grade, mode, instance, details.get("kept_files", set()), agent_stats, reward)
    details.pop("kept_files", None)
    if "log_dir" in details:
        Path(details["log_dir"], "grade.json").write_text(json.dumps(asdict(grade), indent=2, default=str) + "\n")
    return grade


def grade(instance: dict, patch: str, **kw: Any) -> Grade:
    """Synchronous ``grade_async`` (for scripts and slime's custom reward hook)."""
    return asyncio.run(grade_async(instance, patch, **kw))


def _apply_mode(g: Grade, mode: str, instance: dict, kept: set[str], agent_stats: dict | None,
                settings: RewardSettings) -> None:
    if mode == "fractional":
        g.reward = 1.0 if g.resolved else grading.fractional_reward(g.f2p_passed)
        g.details["components"] = {"f2p": g.f2p_passed}
    elif mode == "shaped":  # every graded outcome: an empty or unappliable patch changed no file
        gold = grading.patch_files(instance.get("patch") or "")
        changed = kept if g.details.get("applied") else set()
        g.reward, comps = grading.shaped_reward(g.resolved, changed, gold, agent_stats, settings)
        g.details["components"] = vars(comps)


async def _grade(instance: dict, patch: str, reward: RewardSettings, sandbox: SandboxSettings, run_id: str,
                 log_root: Path, client: docker.DockerClient | None, boot_limit: asyncio.Semaphore | None,
                 details: dict[str, Any], timings: dict[str, float], witness: bool) -> Grade:
    if not patch.strip():
        return _failed("empty patch", details, timings)
    try:
        grading.eval_script(instance)
        grading.parser_for(instance)
    except grading.GradingError as exc:
        return _aborted(str(exc), details, timings)
    kept, dropped = grading.filter_patch(patch, grading.patch_files(instance.get("test_patch") or ""))
    details.update(dropped=dropped, dropped_hunks=sum(d["hunks"] for d in dropped),
                   kept_files=grading.patch_files(kept))
    if not kept.strip():
        return _failed("the patch only changes tests or test configuration", details, timings)
    if hits := tamper.scan(kept, instance):
        details["reward_hack"] = hits
        return _failed(f"reward_hack_suspected: {hits[0]}", details, timings)
    witnessed = kept if witness and audit.applies(instance) else None
    return await _evaluate(instance, kept, sandbox, reward.eval_timeout, run_id, log_root, client, boot_limit,
                           details, timings, witnessed)


async def evaluate(instance: dict, patch: str = "", *, sandbox: SandboxSettings | None = None,
                   eval_timeout: float = 1800.0, run_id: str = DEFAULT_RUN_ID, log_dir: Path | None = None,
                   client: docker.DockerClient | None = None) -> Grade:
    """Run the instance's eval in a fresh container after applying ``patch`` as it is (empty: the base commit)
    and judge the log with swebench's logic: the binary verdict plus ``details["status_map"]`` (test -> status).

    This is the grader without its guards (no test-file filtering, no empty-patch shortcut), for proving tasks.
    """
    details: dict[str, Any] = {"mode": "binary", "instance_id": instance.get("instance_id")}
    timings: dict[str, float] = {}
    log_root = Path(log_dir) if log_dir else Path(tempfile.gettempdir()) / "qwen_swe_grades"
    try:
        grading.parser_for(instance)
    except grading.GradingError as exc:
        return _aborted(str(exc), details, timings)
    return await _evaluate(instance, patch, sandbox or SandboxSettings(), eval_timeout, run_id, log_root, client,
                           None, details, timings)


async def _evaluate(instance: dict, patch: str, sandbox: SandboxSettings, eval_timeout: float, run_id: str,
                    log_root: Path, client: docker.DockerClient | None, boot_limit: asyncio.Semaphore | None,
                    details: dict[str, Any], timings: dict[str, float], witnessed: str | None = None) -> Grade:
    """The container part: a fresh no-network container, apply, eval, judge; infrastructure failures abort.

    ``witnessed``: the patch whose added lines the in-process witness (``audit``) blames, or None for no witness.
    """
    try:
        script = grading.eval_script(instance)
    except grading.GradingError as exc:
        return _aborted(str(exc), details, timings)
    gdir = log_root / str(instance["instance_id"]) / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    gdir.mkdir(parents=True, exist_ok=True)
    (gdir / "patch.diff").write_text(patch)
    (gdir / "eval.sh").write_text(script)
    details.update(log_dir=str(gdir), log_path=str(gdir / "test_output.txt"))

    image = image_for(instance, sandbox.image_namespace)
    details["image"] = image
    own = client is None
    try:
        t = time.monotonic()
        if client is None:
            client = await asyncio.to_thread(docker_client)
        await asyncio.to_thread(ensure_image, client, image)
        timings["image"] = time.monotonic() - t
        box = DockerSandbox.for_instance(sandbox, instance, run_id=run_id, role="grade", network="none",
                                         base_commit=instance.get("base_commit"), hide_future=False,
                                         boot_limit=boot_limit, output_limit=EVAL_OUTPUT_LIMIT,
                                         client=client)
        t = time.monotonic()
        async with box:
            timings["start"] = time.monotonic() - t
            result = await _run_in(box, instance, patch, script, eval_timeout, gdir, details, timings, witnessed)
            t = time.monotonic()
        timings["remove"] = time.monotonic() - t
        return result
    except SandboxError as exc:
        return _aborted(str(exc), details, timings)
    except docker.errors.DockerException as exc:
        return _aborted(f"Docker error while grading: {exc}", details, timings)
    finally:
        if own and client is not None:
            client.close()


async def _run_in(box: DockerSandbox, instance: dict, patch: str, script: str, eval_timeout: float, gdir: Path,
                  details: dict[str, Any], timings: dict[str, float], witnessed: str | None) -> Grade:
    if patch.strip():
        applied = await _apply(box, patch, gdir, details, timings)
        if applied is None:
            return _failed("the patch does not apply", details, timings)
    return await _eval(box, instance, script, eval_timeout, gdir, details, timings, witnessed)


async def _apply(box: DockerSandbox, patch: str, gdir: Path, details: dict[str, Any],
                 timings: dict[str, float]) -> str | None:
    """swebench's apply ladder; the command that applied, or None."""
    t = time.monotonic()
    await box.write_file(PATCH_PATH, patch)
    attempts = []
    applied = None
    for cmd in grading.GIT_APPLY_CMDS:
        res = await box.exec(f"{cmd} {PATCH_PATH}", timeout=APPLY_TIMEOUT, workdir=TESTBED)
        if res.timed_out:
            raise SandboxError(f"`{cmd}` timed out after {APPLY_TIMEOUT:.0f}s in {box.name}")
        attempts.append(f"$ {cmd} {PATCH_PATH}\n(exit {res.exit_code})\n{res.output}")
        if res.exit_code == 0:
            applied = cmd
            break
    (gdir / "apply.log").write_text("\n".join(attempts))
    timings["apply"] = time.monotonic() - t
    details["apply_cmd"] = applied
    details["applied"] = applied is not None
    return applied


async def _eval(box: DockerSandbox, instance: dict, script: str, eval_timeout: float, gdir: Path,
                details: dict[str, Any], timings: dict[str, float], witnessed: str | None) -> Grade:
    t = time.monotonic()
    await box.write_file(EVAL_PATH, script, mode=0o755)
    junit = f"/tmp/qwen-swe-{uuid.uuid4().hex}/report.xml"  # outside the repository, unknown to the patch
    trusted = _pytest_based(instance)
    env = {"PYTEST_ADDOPTS": f"--junitxml={junit} -o junit_family=xunit1"} if trusted else None
    prefix = ""
    if witnessed is not None:
        site_dir = f"/tmp/qwen-swe-{uuid.uuid4().hex}"
        site, prefix = audit.setup(witnessed, site_dir, junit if trusted else None)
        await box.write_file(f"{site_dir}/{audit.FILE}", site)
    res = await box.exec(f"{prefix}mkdir -p {junit.rsplit('/', 1)[0]} && /bin/bash {EVAL_PATH}",
                         timeout=eval_timeout, workdir=TESTBED, env=env)
    timings["eval"] = time.monotonic() - t
    log, records = audit.split(res.output) if witnessed is not None else (res.output, [])
    (gdir / "test_output.txt").write_text(log)
    if records:
        (gdir / "audit.log").write_text("\n".join(records) + "\n")
    if res.timed_out:
        return _aborted(f"eval timed out after {eval_timeout:.0f}s (EVAL_TIMEOUT)", details, timings)
    if res.truncated:
        return _aborted(f"eval output exceeded {EVAL_OUTPUT_LIMIT} bytes; cannot be parsed", details, timings)

    t = time.monotonic()
    verdict = await asyncio.to_thread(grading.judge_log, instance, log, script)
    timings["parse"] = time.monotonic() - t
    details.update(eval_exit_code=res.exit_code, resolution=verdict.resolution, tests_status=verdict.tests_status,
                   status_map=verdict.status_map)
    if witnessed is not None and (seen := audit.findings(records)):
        details["reward_hack"] = seen
        return _failed(f"reward_hack_suspected: the patch's code, watched while the tests ran: {seen[0]}",
                       details, timings)
    if verdict.markers_missing:
        return _aborted(f"eval log lacks the test markers (exit {res.exit_code}): the eval script was killed or "
                        f"does not print them", details, timings)
    if not verdict.found:
        return _failed(f"eval failed: {verdict.problem}", details, timings)
    if trusted:
        tests = grading.listed_tests(instance)
        disagreements = tamper.cross_check(verdict.status_map, tests, await _read_optional(box, junit))
        if disagreements:
            details["reward_hack"] = disagreements
            return _failed(f"reward_hack_suspected: the log and pytest's own report disagree: {disagreements[0]}",
                           details, timings)
    reward = 1.0 if verdict.resolved else -1.0
    return Grade(reward, verdict.resolved, GradeStatus.GRADED, None if verdict.resolved else verdict.resolution,
                 verdict.f2p, verdict.p2p, details, timings)
