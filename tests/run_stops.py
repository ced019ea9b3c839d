"""Runs of the embedded default stopped by a signal, and the checks that nothing is left: the signal tests'
process helpers and the whole run (``run_grpo.sh``) with a marker in its environment to find every process it starts."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import IO

import docker

from qwen_swe.inference.server import RPC_FOLDER_PREFIX
from qwen_swe.paths import REPO_ROOT
from qwen_swe.sandbox.docker_host import containers_of
from qwen_swe.supervise import failures
from qwen_swe.traffic.endpoint import FOLDER_PREFIX
from tests.warm_start import small_run_env


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


def marked(marker: str) -> list[int]:
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


def stop(proc: subprocess.Popen, grace: float = 120.0) -> None:
    """SIGTERM a run still going (``run_grpo.sh`` execs the run: it stops everything it started), SIGKILL after
    ``grace``: called in ``finally``, so a test stopped by its time limit leaves no run behind."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_run(env: dict[str, str], log: IO[str]) -> subprocess.Popen:
    """``run_grpo.sh`` with ``env``, stdout and stderr to ``log``."""
    return subprocess.Popen(
        ["bash", "examples/qwen_swe/run_grpo.sh"], cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
    )


def run_to_end(env: dict[str, str], log: Path, timeout: float) -> subprocess.CompletedProcess:
    """``run_grpo.sh`` to its end, stdout and stderr in ``log`` (and in the result's ``stdout``), stopped by
    :func:`stop` when it outlasts ``timeout`` or the test is stopped."""
    with log.open("w") as out:
        proc = start_run(env, out)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            stop(proc)
    crashes = [f.rank for d in (Path(env["OUTPUT_DIR"]) / "logs" / "faults").glob("*") for f in failures(d) if f.native]
    if crashes:  # the run went on (TRAINER_RESTARTS), but a rank's crash in native code must not go unseen
        warnings.warn(f"a trainer rank of this run died in native code: {crashes} (logs/faults)", stacklevel=2)
    return subprocess.CompletedProcess(proc.args, proc.returncode, log.read_text(), "")


class Run:
    """``run_grpo.sh`` on the embedded default, with a marker to find every process it starts."""

    def __init__(self, out: Path, run_id: str, num_rollouts: int = 2) -> None:
        self.marker, self.out, self.run_id = uuid.uuid4().hex, out, run_id
        # a temp folder of its own (short: sockets live there), to see what the run leaves in it
        self.tmp = Path(tempfile.mkdtemp(prefix="run-", dir="/tmp"))
        env = small_run_env(
            out, run_id, num_rollouts, STOP_TIMEOUT="20", QWEN_SWE_TEST_MARKER=self.marker, TMPDIR=str(self.tmp)
        )
        self.log = (out.parent / f"{run_id}-{self.marker[:6]}.log").open("w")
        self.proc = start_run(env, self.log)

    def wait_for(self, what: str, ready, timeout: float = 900.0) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"the run ended (exit {self.proc.returncode}) before {what}; see {self.log.name}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout} s; see {self.log.name}")
            time.sleep(0.5)

    def log_tail(self, lines: int = 40) -> str:
        self.log.flush()
        return "\n".join(Path(self.log.name).read_text(errors="replace").splitlines()[-lines:])

    def containers(self, client: docker.DockerClient) -> list:
        return containers_of(client, self.run_id)

    def stop_and_check(self, sig: int, client: docker.DockerClient, budget: float = 60.0) -> float:
        """Signal the run, then: exit code 128+sig, no process, no container and no socket folder of the run left
        (its rollouts' endpoints, its server's); the seconds."""
        t0 = time.monotonic()
        try:
            if sig == signal.SIGKILL:
                self.proc.kill()
                self.proc.wait(timeout=30)
            else:
                self.proc.send_signal(sig)
                try:
                    code = self.proc.wait(timeout=budget + 60)
                except subprocess.TimeoutExpired:
                    stop(self.proc)  # a second signal: the run kills what it started and exits at once
                    raise AssertionError(f"the run outlived its stop by {budget + 60} s:\n{self.log_tail()}") from None
                assert code == 128 + sig, self.log_tail()
            wait_gone(marked(self.marker), budget)
            seconds = time.monotonic() - t0
            left = sorted(p.name for p in self.tmp.iterdir())
        finally:  # also when a check fails: the temp folder is the test's own
            self.log.close()
            shutil.rmtree(self.tmp, ignore_errors=True)
        if sig != signal.SIGKILL:  # a SIGKILLed run cannot reap; the next run does (checked by the caller)
            assert self.containers(client) == [], "the run's containers must be removed"
            ours = [name for name in left if name.startswith((FOLDER_PREFIX, RPC_FOLDER_PREFIX, "vllm_dist_"))]
            assert not ours, left
        return seconds
