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

This module holds the guards before any machine and the reward modes; the machine part is ``bench.py``, the
judgement of the log ``judge.py``, and what a grade returns ``outcome.py``.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from qwen_swe.reward import audit, tamper
from qwen_swe.reward import scoring as grading
from qwen_swe.reward.bench import Bench, run_on_bench
from qwen_swe.reward.outcome import Grade, GradeStatus, Record
from qwen_swe.reward.settings import REWARD_MODES, RewardSettings
from qwen_swe.sandbox.base import SandboxFactory
from qwen_swe.sandbox.factory import DockerSandboxes
from qwen_swe.sandbox.settings import SandboxSettings

DEFAULT_RUN_ID = "qwen-swe-grade"  # the container label of a grade outside a run


def _log_root(log_dir: Path | None) -> Path:
    return Path(log_dir) if log_dir else Path(tempfile.gettempdir()) / "qwen_swe_grades"


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
    if mode not in REWARD_MODES:
        raise ValueError(f"reward mode {mode!r} is not one of {', '.join(REWARD_MODES)}")
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
    return await run_on_bench(bench, rec, kept, witnessed)


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
    return await run_on_bench(bench, rec, patch, None)
