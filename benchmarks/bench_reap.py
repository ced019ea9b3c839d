"""The sweep that a stopping run waits for: ``reap`` removing a run's containers (side by side) against the same
containers removed one after another with bare docker-py calls, on the same local task image. Rounds alternate; each
round first creates the containers (not timed).

The gap depends on the engine's load: on an idle overlay2 engine a removal is quick either way; on vfs, where each
container is a full copy of its image, under load (a test pass beside it) four in a row took 70-124 s, four at once
13-24 s.

Run: .venv/bin/python -m benchmarks.bench_reap [--image IMAGE] [--containers N] [--rounds R]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import docker

from benchmarks.bench_sandbox import first_task_image, idle_container
from qwen_swe.sandbox.docker_host import containers_of, reap


def create(client: docker.DockerClient, image: str, run_id: str, n: int) -> None:
    with ThreadPoolExecutor(n) as pool:
        list(pool.map(lambda _: idle_container(client, image, run_id), range(n)))


def one_by_one(client: docker.DockerClient, run_id: str) -> int:
    found = containers_of(client, run_id)
    for c in found:
        c.remove(force=True)
    return len(found)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", help="default: the first task image of the local task pack")
    parser.add_argument("--containers", type=int, default=4, help="containers per round (a step's rollouts)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    image = args.image or first_task_image()
    client = docker.from_env(timeout=300)
    driver = client.info().get("Driver")
    print(f"command: .venv/bin/python -m benchmarks.bench_reap {' '.join(sys.argv[1:])}".rstrip())
    print(f"image {image}, {args.containers} containers a round, storage driver {driver}")
    times: dict[str, list[float]] = {"reap": [], "one by one": []}
    run_id = f"bench-reap-{uuid.uuid4().hex[:8]}"
    try:
        for r in range(args.rounds):
            for name in times:
                create(client, image, run_id, args.containers)
                t0 = time.perf_counter()
                removed = reap(run_id, client) if name == "reap" else one_by_one(client, run_id)
                times[name].append(time.perf_counter() - t0)
                if removed != args.containers:
                    sys.exit(f"{name} removed {removed} of {args.containers}")
                print(f"  round {r} {name:10s}: {times[name][-1]:6.2f} s", flush=True)
    finally:
        reap(run_id, client)
        client.close()
    ours, ref = statistics.median(times["reap"]), statistics.median(times["one by one"])
    print(f"median: reap {ours:.2f} s, one by one {ref:.2f} s; ratio reap/one-by-one {ours / ref:.2f}x")


if __name__ == "__main__":
    main()
