"""Rollout throughput of ROLLOUT_BACKEND=ray with 1, 2 and 4 worker nodes, against the 1-worker figure measured in
the same run.

Each configuration is a fresh local Ray cluster (``ray.cluster_utils.Cluster``: a head without CPUs and N one-CPU
nodes, so one rollout worker per node) running the whole sample pipeline for real: a task container, qwen-code
through the worker's recording proxy, the diff, the grader's fresh container, the trajectory. The scripted model
answers at once; its script makes the agent read a file, replay the gold edit and run ``sleep TOOL_SECONDS`` in
its shell tool, so a sample holds a fixed tool time. Every worker runs ``--groups-per-worker`` groups of
``--n-samples`` samples one sample at a time (ROLLOUT_CONCURRENCY=1 per worker), so perfect scaling keeps the
batch time constant and samples/s grows N-fold. All the "nodes" share this host's cores and Docker engine.

Run: .venv/bin/python -m benchmarks.bench_ray_rollout [--workers 1 2 4] [--tool-seconds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

from qwen_swe.config.settings import Settings
from qwen_swe.data.prompts import build_prompt
from qwen_swe.data.sample import Sample, Status, run_of
from qwen_swe.paths import TASK_PACK, embedded_model_dir
from qwen_swe.rollout.progress import BatchStats
from qwen_swe.rollout.ray_pool import RayRolloutPool
from qwen_swe.sandbox.docker_host import reap
from tests.scripted_server import ServerThread
from tests.task_pack import gold_edit
from tests.toolcall_text import hermes_call


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of the whole host from /proc/stat: how saturated the cores were, whoever used them."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


async def one_batch(settings: Settings, url: str, row: dict, n_groups: int, n_samples: int) -> dict:
    pool = RayRolloutPool(settings, upstream=url, model=settings.model_name, served_model="scripted")
    t0 = time.perf_counter()
    await pool.start()
    started = time.perf_counter() - t0
    try:
        groups = [
            [
                Sample(group_index=g, index=g * n_samples + i, prompt=build_prompt(row), metadata=dict(row))
                for i in range(n_samples)
            ]
            for g in range(n_groups)
        ]
        stats = BatchStats()
        busy0, total0 = cpu_times()
        t0 = time.perf_counter()
        kept = await pool.run_groups(groups, stats)
        seconds = time.perf_counter() - t0
        busy1, total1 = cpu_times()
    finally:
        await pool.stop()
    samples = [x for g in kept for x in g]
    return {
        "seconds": seconds,
        "start": started,
        "cpu_busy": (busy1 - busy0) / max(total1 - total0, 1.0),
        "completed": sum(x.status == Status.COMPLETED for x in samples),
        "resolved": sum(bool(x.metadata.get("resolved")) for x in samples),
        "dropped": stats.reasons,
        "nodes": len({run_of(x).rollout_node for x in samples}),
        "agent_mean": sum(x.metadata.get("agent_seconds", 0.0) for x in samples) / max(len(samples), 1),
        "grade_mean": sum(x.metadata.get("grade_seconds", 0.0) for x in samples) / max(len(samples), 1),
    }


def measure(workers: int, settings: Settings, url: str, row: dict, args: argparse.Namespace) -> dict:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for _ in range(workers):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        return asyncio.run(one_batch(settings, url, row, workers * args.groups_per_worker, args.n_samples))
    finally:
        ray.shutdown()
        cluster.shutdown()
        reap(settings.label)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4], help="worker nodes per configuration")
    parser.add_argument("--tool-seconds", type=float, default=2.0, help="the agent's `sleep` in its shell tool")
    parser.add_argument("--groups-per-worker", type=int, default=1)
    parser.add_argument("--n-samples", type=int, default=2, help="samples per group")
    args = parser.parse_args(argv)
    rows = [json.loads(line) for line in TASK_PACK.read_text().splitlines()] if TASK_PACK.is_file() else []
    row = next((r for r in rows if gold_edit(r.get("patch", ""))), None)
    if row is None:
        sys.exit(f"no usable task in {TASK_PACK}; build the task pack first")
    path, old, new = gold_edit(row["patch"])
    script = [
        hermes_call("read_file", file_path=f"/testbed/{path}"),
        hermes_call("edit", file_path=f"/testbed/{path}", old_string=old, new_string=new),
        hermes_call("run_shell_command", command=f"sleep {args.tool_seconds:g}"),
        "Done.",
    ]
    flags = " ".join(sys.argv[1:] if argv is None else argv)
    print(f"command: .venv/bin/python -m benchmarks.bench_ray_rollout {flags}".rstrip())
    print(
        f"host: {os.cpu_count()} cores; task {row['instance_id']}; 4 scripted turns (read, gold edit, "
        f"sleep {args.tool_seconds:g} s, done), graded; {args.groups_per_worker} group(s) of {args.n_samples} "
        f"per worker, ROLLOUT_CONCURRENCY=1 per worker"
    )
    server = ServerThread(script)
    results: dict[int, dict] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for workers in args.workers:
                settings = Settings.build(
                    vllm_url=server.url,
                    model=str(embedded_model_dir()),
                    served_model_name="scripted",
                    rollout_backend="ray",
                    max_turns=8,
                    agent_timeout=600.0,
                    rollout_concurrency=1,
                    boot_concurrency=1,
                    output_dir=Path(tmp) / f"w{workers}",
                    run_id=f"bench-ray-{uuid.uuid4().hex[:8]}",
                )
                results[workers] = r = measure(workers, settings, server.url, row, args)
                total = workers * args.groups_per_worker * args.n_samples
                r["rate"] = r["completed"] / r["seconds"]
                print(
                    f"{workers} worker(s): {r['completed']}/{total} samples completed ({r['resolved']} resolved) "
                    f"on {r['nodes']} node(s) in {r['seconds']:6.1f} s = {r['rate']:.3f} samples/s   "
                    f"(agent {r['agent_mean']:.1f} s + grade {r['grade_mean']:.1f} s per sample; pool start "
                    f"{r['start']:.1f} s; host CPU busy {100 * r['cpu_busy']:.0f}%; dropped {r['dropped'] or 'none'})",
                    flush=True,
                )
    finally:
        server.stop()
    base = results.get(min(results))
    if base and base["rate"]:
        for workers, r in results.items():
            ratio = r["rate"] / base["rate"]
            print(
                f"{workers} worker(s) vs {min(results)}: {ratio:.2f}x samples/s = {ratio / workers * min(results):.2f}"
                f" of linear"
            )


if __name__ == "__main__":
    main()
