"""Sandbox lifecycle cost: ``DockerSandbox`` start + one exec + forced removal, against the same three steps done
with bare docker-py calls (run, exec_run, remove) on the same local image. Runs alternate.

Run: .venv/bin/python -m benchmarks.bench_sandbox [--image IMAGE] [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from typing import Any

import docker

from qwen_swe.paths import TASK_PACK
from qwen_swe.sandbox.docker import DockerSandbox
from qwen_swe.sandbox.docker_host import labels_for, reap


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def ours(image: str, run_id: str, client: docker.DockerClient) -> float:
    t0 = time.perf_counter()
    async with DockerSandbox(
        image, run_id=run_id, role="bench", network="none", hide_future=False, client=client
    ) as sb:
        res = await sb.exec("echo ok", timeout=60)
    if res.output != "ok\n":
        raise SystemExit(f"exec gave {res!r}")
    return time.perf_counter() - t0


def first_task_image() -> str:
    """The image of the local task pack's first task: the benchmarks' default ``--image``."""
    if not TASK_PACK.is_file():
        sys.exit(f"no task pack at {TASK_PACK}; pass --image or build the pack")
    return str(json.loads(TASK_PACK.read_text().splitlines()[0])["image"])


def idle_container(client: docker.DockerClient, image: str, run_id: str) -> Any:
    """A started container of ``image`` that only sleeps, labelled for ``run_id``: what a sandbox boots, bare."""
    return client.containers.run(
        image,
        entrypoint=["sleep", "infinity"],
        command=[],
        detach=True,
        network_mode="none",
        labels=labels_for(run_id, "bench"),
    )


def bare(image: str, run_id: str, client: docker.DockerClient) -> float:
    t0 = time.perf_counter()
    c = idle_container(client, image, run_id)
    try:
        c.exec_run(["bash", "-c", "echo ok"])
    finally:
        c.remove(force=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--image", default=None, help="local image (default: the first task image of the pack)")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    image = args.image or first_task_image()
    run_id = f"bench-sandbox-{uuid.uuid4().hex[:8]}"
    client = docker.from_env(timeout=300)
    mine, ref = [], []
    try:
        bare(image, run_id, client)  # warm-up
        for _ in range(args.runs):
            mine.append(asyncio.run(ours(image, run_id, client)))
            ref.append(bare(image, run_id, client))
    finally:
        reap(run_id, client)
        client.close()
    flags = " ".join(sys.argv[1:] if argv is None else argv)
    print(f"command: .venv/bin/python -m benchmarks.bench_sandbox {flags}".rstrip())
    print(f"image {image}, {args.runs} alternating runs")
    for name, xs in (("DockerSandbox start+exec+remove", mine), ("bare docker-py (reference)     ", ref)):
        print(f"{name}  p50 {pct(xs, 0.5):6.2f} s   p99 {pct(xs, 0.99):6.2f} s   mean {statistics.mean(xs):6.2f} s")
    print(f"ratio p50 ours / bare             {pct(mine, 0.5) / pct(ref, 0.5):6.2f}x")


if __name__ == "__main__":
    main()
