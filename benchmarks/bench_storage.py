"""Docker's storage drivers: what one sandbox costs under vfs and under overlay2, same image, same machine.

vfs copies the whole image into every new container; overlay2 shares the image's files. The running engine is
measured as it is; a second, private engine with the other driver is started for the run (its own data root,
exec root, socket and pid file in a temporary folder), given the same image by ``docker save | docker load``, and
stopped by its process id at the end, also on SIGTERM or SIGINT. Runs alternate between the two engines. Per
sandbox (``DockerSandbox`` start + one exec + forced removal): wall seconds, and the CPU seconds its dockerd spent.

Run: .venv/bin/python -m benchmarks.bench_storage [--image IMAGE] [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker
import requests

from benchmarks.bench_sandbox import first_task_image
from benchmarks.bench_sandbox import ours as one_sandbox  # the same sandbox cycle, timed
from qwen_swe.sandbox.docker_host import reap

MAIN_PIDFILE = Path("/var/run/docker.pid")  # dockerd's default pid file
START_TIMEOUT = 60.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in clock ticks of 1/100 s


class PrivateEngine:
    """A second dockerd with ``driver`` in ``folder``; ``stop`` ends it by its process id."""

    def __init__(self, driver: str, folder: Path) -> None:
        self.driver, self.folder = driver, folder
        self.socket = folder / "docker.sock"
        self.log = folder / "dockerd.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> docker.DockerClient:
        cmd = [
            "dockerd",
            "--iptables=false",
            "--ip6tables=false",
            "--bridge=none",
            f"--storage-driver={self.driver}",
            f"--data-root={self.folder / 'root'}",
            f"--exec-root={self.folder / 'exec'}",
            f"--pidfile={self.folder / 'docker.pid'}",
            f"--host=unix://{self.socket}",
        ]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(
                    f"dockerd --storage-driver={self.driver} exited {self.proc.returncode}: see {self.log}"
                )
            if self.socket.exists():
                try:  # the socket appears before the API answers
                    return docker.DockerClient(base_url=f"unix://{self.socket}", timeout=300)
                except (docker.errors.DockerException, requests.exceptions.RequestException):
                    pass
            time.sleep(0.5)
        raise SystemExit(f"dockerd --storage-driver={self.driver} did not answer within {START_TIMEOUT:.0f} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def copy_image(image: str, source: docker.DockerClient, target: docker.DockerClient) -> float:
    t0 = time.perf_counter()
    target.images.load(b"".join(source.images.get(image).save(named=True)))
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--image", default=None, help="local image (default: the first task image of the pack)")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    image = args.image or first_task_image()
    if not MAIN_PIDFILE.is_file():
        sys.exit(f"no {MAIN_PIDFILE}: start the Docker engine with scripts/setup.sh")
    main_client = docker.from_env(timeout=300)
    main_driver = main_client.info()["Driver"]
    if main_driver not in ("vfs", "overlay2"):
        sys.exit(f"the running engine uses {main_driver}; this benchmark compares vfs and overlay2")
    other_driver = "overlay2" if main_driver == "vfs" else "vfs"
    folder = Path(tempfile.mkdtemp(prefix="bstore-"))
    engine = PrivateEngine(other_driver, folder)
    run_id = f"bench-storage-{uuid.uuid4().hex[:8]}"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the finally below stops the private engine
    times: dict[str, list[float]] = {main_driver: [], other_driver: []}
    cpu: dict[str, list[float]] = {main_driver: [], other_driver: []}
    other_client = None
    try:
        other_client = engine.start()
        loaded = copy_image(image, main_client, other_client)
        engines = {
            main_driver: (main_client, int(MAIN_PIDFILE.read_text())),
            other_driver: (other_client, engine.proc.pid),
        }
        for client, _ in engines.values():
            asyncio.run(one_sandbox(image, run_id, client))  # warm-up
        for _ in range(args.runs):
            for driver, (client, pid) in engines.items():
                before = cpu_seconds(pid)
                times[driver].append(asyncio.run(one_sandbox(image, run_id, client)))
                cpu[driver].append(cpu_seconds(pid) - before)
    finally:
        for client in (main_client, other_client):
            if client is not None:
                reap(run_id, client)
                client.close()
        engine.stop()
        shutil.rmtree(folder, ignore_errors=True)
    flags = " ".join(sys.argv[1:] if argv is None else argv)
    print(f"command: .venv/bin/python -m benchmarks.bench_storage {flags}".rstrip())
    print(f"image {image}; {args.runs} alternating runs; the {other_driver} engine was loaded in {loaded:.1f} s")
    for driver in ("vfs", "overlay2"):
        print(
            f"{driver:9s} sandbox start+exec+remove  p50 {statistics.median(times[driver]):6.2f} s  "
            f"max {max(times[driver]):6.2f} s   dockerd CPU {statistics.median(cpu[driver]):6.2f} s per sandbox"
        )
    print(
        f"ratio overlay2 / vfs: wall {statistics.median(times['overlay2']) / statistics.median(times['vfs']):.3f}x, "
        f"dockerd CPU {statistics.median(cpu['overlay2']) / max(statistics.median(cpu['vfs']), 0.01):.3f}x"
    )


if __name__ == "__main__":
    main()
