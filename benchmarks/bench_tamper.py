"""What the in-process witness (``reward.audit``) costs a grade: each gold patch of the local pack (or one task)
graded with it and without it (``grade_async(..., witness=False)``), runs alternating to share the machine's noise.
The whole grade and its eval step (where the witness runs) are both reported, per task (median) and summed over the
tasks; the eval step is the honest ratio, the grade the one a run feels.

Run: .venv/bin/python -m benchmarks.bench_tamper [--task INSTANCE_ID] [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker

from qwen_swe.data.taskpack import TASKS_JSONL
from qwen_swe.errors import TaskPackError
from qwen_swe.reward.harness import Grade, grade_async
from qwen_swe.reward.settings import RewardSettings
from qwen_swe.sandbox.docker_host import reap
from qwen_swe.sandbox.factory import DockerSandboxes
from qwen_swe.sandbox.settings import SandboxSettings
from tests.task_pack import pack_task


def _grade(task: dict, witness: bool, log_dir: Path, run_id: str, client: docker.DockerClient) -> tuple[float, Grade]:
    t0 = time.perf_counter()
    grade = asyncio.run(
        grade_async(
            task,
            task["patch"],
            reward=RewardSettings(eval_timeout=300.0),
            sandbox=SandboxSettings(image_namespace=""),
            run_id=run_id,
            log_dir=log_dir,
            sandboxes=DockerSandboxes(SandboxSettings(image_namespace=""), client=client),
            witness=witness,
        )
    )
    seconds = time.perf_counter() - t0
    if not grade.resolved or "reward_hack" in grade.details:
        sys.exit(
            f"the gold patch of {task['instance_id']} (witness {witness}) was not resolved cleanly: "
            f"{grade.status} {grade.reason}"
        )
    return seconds, grade


def _tasks(task: str | None) -> list[dict]:
    if task:
        return [pack_task(task)]
    return [json.loads(line) for line in TASKS_JSONL.read_text().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", default=None, help="one instance id from the local task pack (default: every task)")
    parser.add_argument("--runs", type=int, default=3, help="alternating runs per task and setting")
    args = parser.parse_args(argv)
    try:
        tasks = _tasks(args.task)
    except TaskPackError as exc:
        sys.exit(str(exc))
    run_id = f"bench-tamper-{uuid.uuid4().hex[:8]}"
    client = docker.from_env(timeout=300)
    medians: dict[str, dict[tuple[bool, str], float]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for task in tasks:
                _grade(task, False, Path(tmp), run_id, client)  # warm the page cache for both
                seen: dict[tuple[bool, str], list[float]] = {}
                for _ in range(args.runs):
                    for witness in (True, False):
                        seconds, grade = _grade(task, witness, Path(tmp), run_id, client)
                        seen.setdefault((witness, "grade"), []).append(seconds)
                        seen.setdefault((witness, "eval"), []).append(grade.timings["eval"])
                medians[task["instance_id"]] = {k: statistics.median(v) for k, v in seen.items()}
    finally:
        reap(run_id, client)
        client.close()
    flags = " ".join(sys.argv[1:] if argv is None else argv)
    print(f"command: .venv/bin/python -m benchmarks.bench_tamper {flags}".rstrip())
    print(f"{len(tasks)} gold patches, {args.runs} alternating runs each (median per task)")
    print(f"{'task':28} {'grade':>9} {'without':>8} {'ratio':>6}   {'eval':>9} {'without':>8} {'ratio':>6}")
    for instance_id, m in medians.items():
        print(f"{instance_id:28} {_cells(m, 'grade')}   {_cells(m, 'eval')}")
    total = {key: sum(m[key] for m in medians.values()) for key in next(iter(medians.values()))}
    print(
        f"summed over the tasks, with / without the witness: grade {_cells(total, 'grade')}, eval step "
        f"{_cells(total, 'eval')}"
    )


def _cells(m: dict[tuple[bool, str], float], what: str) -> str:
    return f"{m[True, what]:8.2f}s {m[False, what]:7.2f}s {m[True, what] / m[False, what]:5.2f}x"


if __name__ == "__main__":
    main()
