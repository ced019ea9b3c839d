"""Resource limits of a real rollout container (as the rollout engine starts it: no network, SANDBOX_CPUS,
SANDBOX_MEMORY, the sandbox's pids limit) hold against what a policy's shell can do: a fork bomb, an allocation past
the memory limit, background processes that leave the exec's process group and the agent's marker. Each is checked
from the host: the exec ends, the container's process count and memory stay within the limit, the host keeps
starting processes, and nothing of the container outlives its removal.

Filling the disk: Docker's per-container size limit (``--storage-opt size``) needs overlay2 on xfs with project quotas
and this machine and CI have ext4, so the engine's ``DiskBudget`` (SANDBOX_DISK) measures the writable layer and
kills the container past it; the test writes 80 MB/s against a 64 MiB budget.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from pathlib import Path

import docker
import pytest

from qwen_swe.sandbox.disk import DiskBudget, DiskLimitExceeded
from qwen_swe.sandbox.docker import KILL_GRACE, PIDS_LIMIT, RESTART_GRACE, DockerSandbox
from qwen_swe.sandbox.docker_host import containers_of
from tests.task_pack import replayable_task

pytestmark = pytest.mark.docker
MEMORY = "512m"
EXEC_SLACK = 1  # the kill's own shell: a `docker exec` process the runtime attaches past the pids limit


@pytest.fixture(scope="module")
def image() -> str:
    return replayable_task()["image"]


def _box(image: str, run_id: str) -> DockerSandbox:
    return DockerSandbox(image, run_id=run_id, cpus=1.0, memory=MEMORY, network="none", hide_future=False)


def _host_still_forks() -> bool:
    return subprocess.run(["true"], timeout=30).returncode == 0


def _host_processes_with(marker: str) -> list[str]:
    """Command lines of host processes carrying ``marker`` (a container's processes are host processes too)."""
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, timeout=30).stdout
    return [line for line in out.splitlines() if marker in line and "ps -eo" not in line]


async def _eventually(probe, timeout: float = 30.0):
    """``probe()``'s first truthy value within ``timeout`` seconds (polled), else its last value."""
    deadline = time.monotonic() + timeout
    while not (value := await asyncio.to_thread(probe)) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    return value


def _pids_current(container_id: str) -> Path | None:
    """The container's pids cgroup counter as the host sees it (cgroup v1 or v2, cgroupfs or systemd driver)."""
    for base in (
        f"/sys/fs/cgroup/pids/docker/{container_id}",
        f"/sys/fs/cgroup/docker/{container_id}",
        f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope",
    ):
        if (Path(base) / "pids.current").is_file():
            return Path(base) / "pids.current"
    return None


def _own_tasks(cgroup: Path) -> int:
    """The container's tasks (threads) in its pids cgroup, less the container runtime's: a `docker exec` attaches its
    ``runc init`` (comm ``runc:[2:INIT]``, half a dozen threads, longer on busy cores) to the cgroup from outside,
    which pids.max does not stop (it limits forks only, kernel pids.rst); CI saw pids.current at 1025 and 1030 of
    1024 from it. What the bomb forks is what the limit must hold."""
    listing = cgroup / "cgroup.threads" if (cgroup / "cgroup.threads").is_file() else cgroup / "tasks"
    own = 0
    for tid in listing.read_text().split():
        try:
            own += not Path(f"/proc/{tid}/comm").read_text().startswith("runc:")
        except OSError:  # ended meanwhile
            continue
    return own


def _at_most(counter: Path, n: int) -> int | None:
    """The counter's value if it is at most ``n``, else None."""
    value = int(counter.read_text())
    return value if value <= n else None


def test_a_fork_bomb_stays_inside_the_pids_limit(image, run_id):
    """The bomb stays within the container's pids limit; the host keeps forking all along; the exec ends by its timeout
    (the agent's outcome is then ``timeout``, graded): a kill from inside cannot start in a container at its limit,
    so the sandbox restarts it, which ends the bomb and keeps the files (the agent's diff is read after)."""

    async def scenario() -> tuple[object, int, int, bool, object, int]:
        async with _box(image, run_id) as box:
            await box.write_file("/testbed/kept.txt", "the agent's edit\n")
            client = docker.from_env(timeout=60)
            try:
                attrs = client.containers.get(box.name).attrs
            finally:
                client.close()
            counter = _pids_current(attrs["Id"])
            bomb = asyncio.ensure_future(box.exec("bomb() { bomb | bomb & }; bomb; sleep 600", timeout=20))
            peak, host_ok = 0, True
            while not bomb.done():
                if counter is not None:
                    peak = max(peak, await asyncio.to_thread(_own_tasks, counter.parent))
                host_ok = host_ok and await asyncio.to_thread(_host_still_forks)
                await asyncio.sleep(0.5)
            # the killed processes leave the pids counter as the container's init reaps them: on busy cores that
            # takes a while, and until then a new exec may find no pid free
            left = -1 if counter is None else await _eventually(lambda: _at_most(counter, 4), timeout=120)
            after = await box.exec("cat /testbed/kept.txt", timeout=60)
            return await bomb, int(attrs["HostConfig"]["PidsLimit"]), peak, host_ok, after, left

    t0 = time.monotonic()
    bomb, limit, peak, host_ok, after, left = asyncio.run(scenario())
    print(
        f"fork bomb: pids limit {limit}, peak {peak}, exec ended after {bomb.seconds:.1f} s "
        f"(timed out: {bomb.timed_out}), {left} processes after it, container removed "
        f"{time.monotonic() - t0:.1f} s after start"
    )
    # ended at its timeout (or earlier when the memory limit's OOM killer took the exec's own shell), within the
    # kill's and the restart's bounds
    assert bomb.timed_out or bomb.exit_code == 137
    assert bomb.seconds < 20 + 3 * KILL_GRACE + RESTART_GRACE
    # the kernel enforces pids.max on fork only; `docker exec` moves its process into the cgroup, which the limit
    # does not stop: the runtime's threads are not counted (_own_tasks), the kill's own shell is the one allowed past
    assert 0 < limit <= PIDS_LIMIT and peak <= limit + EXEC_SLACK
    assert after.exit_code == 0 and after.output == "the agent's edit\n", after  # the files stayed, the bomb did not
    assert left is not None and left <= 4  # init and `sleep infinity` again (-1: no counter readable on this host)
    assert host_ok and _host_still_forks()


def test_an_allocation_past_the_memory_limit_is_killed_in_the_container(image, run_id):
    grab = "python3 -c 'a = []\nwhile True: a.append(bytearray(64 << 20))'"

    async def scenario() -> tuple[object, object]:
        async with _box(image, run_id) as box:
            hog = await box.exec(grab, timeout=120)
            alive = await box.exec("echo alive", timeout=60)
            return hog, alive

    hog, alive = asyncio.run(scenario())
    assert hog.exit_code == 137 and not hog.timed_out, hog  # SIGKILL by the container's OOM killer
    assert alive.exit_code == 0 and "alive" in alive.output  # the container, and the run, go on
    assert _host_still_forks()


def test_background_processes_end_with_the_container(image, run_id):
    marker = f"{uuid.uuid4().int % 10**9 + 10**9}"
    # a daemon that leaves the exec's process group and session and clears its environment (the agent's marker);
    # the exec returns only once it has its own session (it writes its pid after setsid), so the escape is not a
    # race against the end of the exec
    escape = (
        f"rm -f /tmp/escaped; env -i setsid nohup sh -c 'echo $$ > /tmp/escaped; exec sleep {marker}' "
        "> /dev/null 2>&1 < /dev/null & while [ ! -s /tmp/escaped ]; do sleep 0.05; done; echo started"
    )

    async def scenario() -> list[str]:
        async with _box(image, run_id) as box:
            res = await box.exec(escape, timeout=60)
            assert "started" in res.output
            running = await _eventually(lambda: _host_processes_with(f"sleep {marker}"))  # exec'd after its pid
        assert running, "the escaped process was not running while the container was"
        # a killed process leaves the process table when the kernel has reaped it, not at the instant of the kill
        gone = await _eventually(lambda: not _host_processes_with(f"sleep {marker}"))
        return [] if gone else _host_processes_with(f"sleep {marker}")

    assert asyncio.run(scenario()) == []  # removed with the container
    client = docker.from_env(timeout=60)
    try:
        assert containers_of(client, run_id) == []
    finally:
        client.close()


def test_writing_past_the_disk_budget_kills_the_container(image, run_id):
    budget_bytes = 64 << 20
    fill = "for i in $(seq 100); do head -c 8M /dev/zero > /tmp/fill.$i; sleep 0.1; done; echo finished"

    async def scenario() -> tuple[DiskLimitExceeded, int, float, str]:
        output = ""
        async with _box(image, run_id) as box:
            t0 = time.monotonic()
            with pytest.raises(DiskLimitExceeded) as caught:
                async with DiskBudget(box.name, budget_bytes, interval=0.5) as budget:
                    output = (await box.exec(fill, timeout=120)).output
            return caught.value, budget.exceeded, time.monotonic() - t0, output

    error, written, seconds, output = asyncio.run(scenario())
    print(f"disk budget 64 MiB: stopped at {written >> 20} MiB after {seconds:.1f} s ({error})")
    assert error.reason.value == "disk_limit" and "SANDBOX_DISK" in str(error)
    assert budget_bytes < written < budget_bytes + (200 << 20) and "finished" not in output
    assert _host_still_forks()
