"""What the in-process witness (``reward.audit``) costs a grade: the same gold patch graded with it and without it
(``grade_async(..., witness=False)``), runs alternating to share the machine's noise. The whole grade and its eval
step (where the witness runs) are both reported; the eval step is the honest ratio, the grade the one a run feels.

Run: .venv/bin/python -m benchmarks.bench_tamper [--task INSTANCE_ID] [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker

from qwen_swe.data.taskpack import pack_task
from qwen_swe.errors import TaskPackError
from qwen_swe.reward.harness import Grade, grade_async
from qwen_swe.reward.settings import RewardSettings
from qwen_swe.sandbox.docker import reap
from qwen_swe.sandbox.factory import DockerSandboxes
from qwen_swe.sandbox.settings import SandboxSettings


def _grade(task: dict, witness: bool, log_dir: Path, run_id: str, client: docker.DockerClient) -> tuple[float, Grade]:
    t0 = time.perf_counter()
    grade = asyncio.run(grade_async(task, task["patch"], reward=RewardSettings(eval_timeout=300.0),
                                    sandbox=SandboxSettings(image_namespace=""), run_id=run_id, log_dir=log_dir,
                                    sandboxes=DockerSandboxes(SandboxSettings(image_namespace=""), client=client),
                                    witness=witness))
    seconds = time.perf_counter() - t0
    if not grade.resolved or "reward_hack" in grade.details:
        sys.exit(f"the gold patch of {task['instance_id']} (witness {witness}) was not resolved cleanly: "
                 f"{grade.status} {grade.reason}")
    return seconds, grade


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", default=None, help="instance id from the local task pack (default: the first)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    try:
        task = pack_task(args.task)
    except TaskPackError as exc:
        sys.exit(str(exc))
    run_id = f"bench-tamper-{uuid.uuid4().hex[:8]}"
    client = docker.from_env(timeout=300)
    total: dict[bool, list[float]] = {True: [], False: []}
    evals: dict[bool, list[float]] = {True: [], False: []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            _grade(task, False, Path(tmp), run_id, client)  # warm the page cache for both
            for _ in range(args.runs):
                for witness in (True, False):
                    seconds, grade = _grade(task, witness, Path(tmp), run_id, client)
                    total[witness].append(seconds)
                    evals[witness].append(grade.timings["eval"])
    finally:
        reap(run_id, client)
        client.close()
    flags = " ".join(sys.argv[1:] if argv is None else argv)
    med = {k: statistics.median(v) for k, v in total.items()}
    med_eval = {k: statistics.median(v) for k, v in evals.items()}
    print(f"command: .venv/bin/python -m benchmarks.bench_tamper {flags}".rstrip())
    print(f"task {task['instance_id']}, {args.runs} alternating runs each (median)")
    print(f"grade with the witness          {med[True]:7.2f} s   eval step {med_eval[True]:6.2f} s")
    print(f"grade without it (reference)    {med[False]:7.2f} s   eval step {med_eval[False]:6.2f} s")
    print(f"ratio with / without            {med[True] / med[False]:7.2f}x  eval step "
          f"{med_eval[True] / med_eval[False]:.2f}x")


if __name__ == "__main__":
    main()
