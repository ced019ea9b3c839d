"""The machine part of a grade: a fresh sandbox from the instance image, the patch applied with swebench's ladder,
the eval script run (with pytest's own report and the tamper witness where they apply), the log judged
(``judge.py``); an infrastructure failure aborts the grade. Each grade writes its own folder
``<log_root>/<instance_id>/<grade id>/`` (patch, eval script, test output, apply and audit logs)."""

from __future__ import annotations

import functools
import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from qwen_swe.errors import SandboxError
from qwen_swe.paths import TESTBED
from qwen_swe.reward import audit
from qwen_swe.reward import scoring as grading
from qwen_swe.reward.judge import judge
from qwen_swe.reward.outcome import Grade, Record
from qwen_swe.sandbox.base import Sandbox, SandboxFactory, SandboxRequest
from qwen_swe.sandbox.settings import NO_NETWORK

PATCH_PATH = "/tmp/patch.diff"
EVAL_PATH = "/eval.sh"
EVAL_OUTPUT_LIMIT = 64 << 20  # an eval log is parsed, so it must not be cut; larger is an aborted grade
APPLY_TIMEOUT = 300.0
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Bench:
    """Where grades run, the same for every grade of a caller: the machines, their label, network and time limit,
    and the folder that gets one sub-folder per grade."""

    sandboxes: SandboxFactory
    run_id: str
    log_root: Path
    eval_timeout: float
    network: str = NO_NETWORK


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


async def run_on_bench(bench: Bench, rec: Record, patch: str, witnessed: str | None) -> Grade:
    """The machine part: a fresh sandbox, apply, eval, judge; infrastructure failures abort.

    ``witnessed``: the patch whose added lines the in-process witness (``audit``) blames, or None for no witness.
    """
    try:
        script = grading.eval_script(rec.instance)
    except grading.GradingError as exc:
        return rec.aborted(str(exc))
    _open_folder(bench, rec, patch, script)
    if bench.network != NO_NETWORK:
        log.warning(
            "grading %s with network %r (GRADE_NETWORK): the code under test can reach out",
            rec.instance.get("instance_id"),
            bench.network,
        )
        rec.details["network"] = bench.network
    box = bench.sandboxes(_request(bench, rec.instance))
    rec.details["image"] = box.image
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


def _open_folder(bench: Bench, rec: Record, patch: str, script: str) -> None:
    """The grade's own folder, holding what it will run before it runs, and named in the grade's details."""
    rec.folder = _new_folder(bench.log_root, rec.instance)
    (rec.folder / "patch.diff").write_text(patch)
    (rec.folder / "eval.sh").write_text(script)
    rec.details.update(log_dir=str(rec.folder), log_path=str(rec.folder / "test_output.txt"))


def _request(bench: Bench, instance: dict) -> SandboxRequest:
    """A grading machine: the instance image at its base commit (its history left as the image has it), the bench's
    network, and room for the whole eval log."""
    return SandboxRequest(
        instance,
        bench.run_id,
        "grade",
        network=bench.network,
        base_commit=instance.get("base_commit"),
        hide_future=False,
        output_limit=EVAL_OUTPUT_LIMIT,
    )


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
    return await judge(rec, script, log_text, res.exit_code, records if witnessed is not None else None, report)
