"""What official grading costs over the work it cannot avoid: one ``grade`` (fresh container, patch ladder, eval
script, swebench parsing, forced removal) against running the same eval by hand in a container of the same image
(``containers.run`` of ``git apply && bash eval.sh``, then removal). Runs alternate to share the machine's noise.

Run: .venv/bin/python -m benchmarks.bench_grade [--task INSTANCE_ID] [--runs N]
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

from qwen_swe.config.settings import Settings
from qwen_swe.errors import TaskPackError
from qwen_swe.reward import scoring as grading
from qwen_swe.reward.harness import grade_async
from qwen_swe.sandbox.docker_host import labels_for, reap
from qwen_swe.sandbox.factory import DockerSandboxes
from tests.task_pack import pack_task

_BY_HAND = (
    'cd /testbed && printf %s "$PATCH" > /tmp/p.diff && git apply /tmp/p.diff && printf %s "$EVAL" > /eval.sh '
    "&& bash /eval.sh"
)


def direct(client: docker.DockerClient, task: dict, run_id: str) -> tuple[float, str]:
    """The reference: the same eval in a container of the same image, nothing else."""
    t0 = time.perf_counter()
    c = client.containers.run(
        task["image"],
        entrypoint=["bash", "-c", _BY_HAND],
        command=[],
        detach=True,
        network_mode="none",
        labels=labels_for(run_id, "bench"),
        environment={"PATCH": task["patch"], "EVAL": grading.eval_script(task)},
    )
    try:
        c.wait(timeout=600)
        log = c.logs().decode(errors="replace")
    finally:
        c.remove(force=True)
    return time.perf_counter() - t0, log


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", default=None, help="instance id from the local task pack (default: the first)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    try:
        task = pack_task(args.task)
    except TaskPackError as exc:
        sys.exit(str(exc))
    run_id = f"bench-grade-{uuid.uuid4().hex[:8]}"
    client = docker.from_env(timeout=300)
    graded, by_hand, parts = [], [], {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings.build(output_dir=Path(tmp))
            direct(client, task, run_id)  # warm the page cache for both paths
            for _ in range(args.runs):
                t0 = time.perf_counter()
                g = asyncio.run(
                    grade_async(
                        task,
                        task["patch"],
                        reward=settings.reward,
                        sandbox=settings.sandbox,
                        log_dir=settings.output_dir / "grades",
                        run_id=run_id,
                        sandboxes=DockerSandboxes(settings.sandbox, client=client),
                    )
                )
                graded.append(time.perf_counter() - t0)
                if not g.resolved:
                    sys.exit(f"the gold patch of {task['instance_id']} did not resolve: {g.status} {g.reason}")
                for k, v in g.timings.items():
                    parts.setdefault(k, []).append(v)
                seconds, log = direct(client, task, run_id)
                by_hand.append(seconds)
                if ">>>>> End Test Output" not in log:
                    sys.exit(f"the by-hand eval did not finish: {log[-2000:]}")
    finally:
        reap(run_id, client)
        client.close()
    flags = " ".join(sys.argv[1:] if argv is None else argv)
    g_med, d_med = statistics.median(graded), statistics.median(by_hand)
    print(f"command: .venv/bin/python -m benchmarks.bench_grade {flags}".rstrip())
    print(f"task {task['instance_id']}, image {task['image']}, {args.runs} alternating runs (median)")
    print(f"grade (gold patch)            {g_med:7.2f} s   min {min(graded):6.2f}  max {max(graded):6.2f}")
    print(f"same eval by hand (reference) {d_med:7.2f} s   min {min(by_hand):6.2f}  max {max(by_hand):6.2f}")
    print(f"ratio grade / by hand         {g_med / d_med:7.2f}x  (target <= 1.3x)")
    print("grade breakdown (median s):   " + "  ".join(f"{k} {statistics.median(v):.2f}" for k, v in parts.items()))


if __name__ == "__main__":
    main()
