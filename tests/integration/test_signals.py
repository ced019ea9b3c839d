"""Stops that leave nothing behind, with real processes: the supervisor on its own (fast), then the whole run on
the embedded default signalled at several phases (slow: vLLM, Docker, qwen-code, torchrun)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import docker
import pytest

from qwen_swe.paths import REPO_ROOT
from tests.warm_start import small_run_env

PARENT = textwrap.dedent("""
    import signal, sys, time
    from qwen_swe.supervise import SUPERVISOR, Interrupted, install
    install()
    child = SUPERVISOR.spawn([sys.executable, "-c", sys.argv[1]])
    try:
        print(child.pid, flush=True)
        while True:
            time.sleep(0.1)
    except Interrupted as stop:
        code = stop.exit_code
    finally:
        SUPERVISOR.stop(child, grace=float(sys.argv[2]))
    sys.exit(code)
""")
SLEEPER = "import time\nwhile True: time.sleep(0.1)"
# says "ignoring" on the shared stdout once its handler is in place, so the test signals it only then
STUBBORN = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ignoring', flush=True)\n"
    "while True: time.sleep(0.1)"
)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout: float) -> float:
    start = time.monotonic()
    while any(alive(p) for p in pids):
        if time.monotonic() - start > timeout:
            raise AssertionError(f"still running after {timeout} s: {[p for p in pids if alive(p)]}")
        time.sleep(0.05)
    return time.monotonic() - start


def _parent(child: str, grace: float = 30.0) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", PARENT, child, str(grace)], stdout=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT
    )
    return proc, int(proc.stdout.readline())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_stops_the_children_and_says_so_in_the_exit_code(sig):
    proc, child = _parent(SLEEPER)
    try:
        assert alive(child)
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 128 + sig
        wait_gone([child], 5)
    finally:
        proc.kill()


def test_a_second_signal_does_not_wait_for_a_child_that_ignores_the_first():
    proc, child = _parent(STUBBORN, grace=120.0)
    try:
        assert proc.stdout.readline().strip() == "ignoring"
        proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        assert proc.poll() is None and alive(child), "the first signal waits for the child (grace 120 s)"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143
        wait_gone([child], 30)
        assert time.monotonic() - t0 < 60  # far below the child's 120 s grace, however busy the machine
    finally:
        proc.kill()


def test_children_die_with_a_parent_killed_by_sigkill():
    proc, child = _parent(SLEEPER)
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        wait_gone([child], 10)
    finally:
        proc.kill()


# --- the whole run ----------------------------------------------------------------------------------------------


def _marked(marker: str) -> list[int]:
    """Processes (not zombies) carrying the run's marker in their environment: everything the run started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if f"QWEN_SWE_TEST_MARKER={marker}".encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return [p for p in found if alive(p)]


class Run:
    """``run_grpo.sh`` on the embedded default, with a marker to find every process it starts."""

    def __init__(self, out: Path, run_id: str, num_rollouts: int = 2) -> None:
        self.marker, self.out, self.run_id = uuid.uuid4().hex, out, run_id
        env = {k: v for k, v in os.environ.items() if k not in ("VLLM_URL", "MODEL", "DATASET")}
        env.update(
            OUTPUT_DIR=str(out),
            NUM_ROLLOUTS=str(num_rollouts),
            RUN_ID=run_id,
            STOP_TIMEOUT="20",
            QWEN_SWE_TEST_MARKER=self.marker,
            **small_run_env(),
        )
        self.log = (out.parent / f"{run_id}-{self.marker[:6]}.log").open("w")
        self.proc = subprocess.Popen(
            ["bash", "examples/qwen_swe/run_grpo.sh"], cwd=REPO_ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT
        )

    def wait_for(self, what: str, ready, timeout: float = 900.0) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"the run ended (exit {self.proc.returncode}) before {what}; see {self.log.name}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout} s; see {self.log.name}")
            time.sleep(0.5)

    def containers(self, client: docker.DockerClient) -> list:
        return client.containers.list(all=True, filters={"label": f"qwen-swe.run={self.run_id}"})

    def stop_and_check(self, sig: int, client: docker.DockerClient, budget: float = 60.0) -> float:
        """Signal the run, then: exit code 128+sig, no process and no container of the run left; the seconds."""
        t0 = time.monotonic()
        if sig == signal.SIGKILL:
            self.proc.kill()
            self.proc.wait(timeout=30)
        else:
            self.proc.send_signal(sig)
            assert self.proc.wait(timeout=budget + 60) == 128 + sig
        wait_gone(_marked(self.marker), budget)
        seconds = time.monotonic() - t0
        self.log.close()
        if sig != signal.SIGKILL:  # a SIGKILLed run cannot reap; the next run does (checked by the caller)
            assert self.containers(client) == [], "the run's containers must be removed"
        return seconds


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.vllm
@pytest.mark.agent
def test_the_run_stops_cleanly_at_every_phase_and_resumes(tmp_path):
    client = docker.from_env()
    out = tmp_path / "run"
    out.mkdir()
    run_id = f"qwen-swe-signals-{uuid.uuid4().hex[:6]}"
    timings = {}

    # 1. while the vLLM server starts
    run = Run(out, run_id)
    run.wait_for(
        "vLLM server log", lambda: any((out / "logs").glob("vllm-*.log")) if (out / "logs").is_dir() else False
    )
    timings["server start"] = run.stop_and_check(signal.SIGTERM, client)

    # 2. SIGINT in the middle of a rollout (a rollout container is up)
    run = Run(out, run_id)
    run.wait_for("rollout container", lambda: bool(run.containers(client)))
    timings["rollout"] = run.stop_and_check(signal.SIGINT, client)

    # 3. SIGKILL of the main process during the rollout: server and trainer die by themselves
    run = Run(out, run_id)
    run.wait_for("rollout container", lambda: bool(run.containers(client)))
    timings["sigkill"] = run.stop_and_check(signal.SIGKILL, client)

    # 4. the next run reaps what was left, trains a step to the end, and leaves nothing (one step: the resume of a
    # checkpoint is test_embedded_run's)
    final = subprocess.run(
        ["bash", "examples/qwen_swe/run_grpo.sh"],
        cwd=REPO_ROOT,
        timeout=2400,
        capture_output=True,
        text=True,
        env={
            **{k: v for k, v in os.environ.items() if k not in ("VLLM_URL", "MODEL", "DATASET")},
            "OUTPUT_DIR": str(out),
            "NUM_ROLLOUTS": "1",
            "RUN_ID": run_id,
            **small_run_env(),
        },
    )
    assert final.returncode == 0, final.stderr[-4000:]
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1
    assert client.containers.list(all=True, filters={"label": f"qwen-swe.run={run_id}"}) == []
    print("seconds from signal to everything gone:", timings)
