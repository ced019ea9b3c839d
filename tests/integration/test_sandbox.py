"""DockerSandbox against the real engine and a local task image: exec, timeouts, files, diffs, hiding the
future, labels and limits, removal on every path, reaping after a SIGKILLed runner."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import docker.errors
import pytest
from docker.models.containers import Container

from qwen_swe.paths import REPO_ROOT, TASK_PACK
from qwen_swe.sandbox.docker import KILL_GRACE, RESTART_GRACE, DockerSandbox, SandboxError
from qwen_swe.sandbox.docker_host import ANNOUNCE_PREFIX, LABEL, containers_of, labels_for, reap
from tests.held_create import held_creates
from tests.task_pack import BUILD_HINT, missing

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def image() -> str:
    """The first task image of the local task pack (any image with bash, git and setsid would do)."""
    if not TASK_PACK.is_file():
        missing(f"no task pack at {TASK_PACK}; {BUILD_HINT}")
    row = json.loads(TASK_PACK.read_text().splitlines()[0])
    client = docker.from_env(timeout=60)
    try:
        if not client.images.list(name=row["image"]):
            missing(f"task image {row['image']} is missing; {BUILD_HINT}")
    finally:
        client.close()
    return row["image"]


@pytest.fixture(scope="module")
def box(image):
    """One sandbox shared by the tests that only exec and touch files (container starts are the slow part)."""
    rid = f"test-{uuid.uuid4().hex[:10]}"
    sb = _box(image, rid, output_limit=64 * 1024)
    asyncio.run(sb.start())
    try:
        yield sb
    finally:
        asyncio.run(sb.stop())
        assert reap(rid) == 0


def _box(image: str, run_id: str, **kw) -> DockerSandbox:
    kw.setdefault("hide_future", False)
    kw.setdefault("network", "none")
    return DockerSandbox(image, run_id=run_id, **kw)


def _exists(client: docker.DockerClient, name: str) -> bool:
    try:
        client.containers.get(name)
        return True
    except docker.errors.NotFound:
        return False


def test_exec_keeps_what_the_command_printed_before_the_client_read_the_headers(box, monkeypatch):
    """A slow client (each response's headers read 1 s late, as on a loaded machine): the command's first lines
    reach the client in the same read as the engine's headers, and stay in the output (exec_stream.py; docker-py's
    own reader dropped them, and a CI run on vfs lost an eval log's start marker so)."""
    import http.client

    begin = http.client.HTTPResponse.begin

    def late_begin(self):
        time.sleep(1.0)
        return begin(self)

    monkeypatch.setattr(http.client.HTTPResponse, "begin", late_begin)

    async def body():
        r = await box.exec("echo first; echo second; seq 3", timeout=60)
        assert (r.exit_code, r.output) == (0, "first\nsecond\n1\n2\n3\n")

    asyncio.run(body())


def test_exec_exit_codes_output_workdir_env(box):
    async def body():
        r = await box.exec("echo out; echo err >&2; exit 3", timeout=30)
        assert (r.exit_code, r.timed_out, r.truncated) == (3, False, False)
        assert "out\n" in r.output and "err\n" in r.output
        r = await box.exec('pwd; echo "$FOO"', timeout=30, workdir="/tmp", env={"FOO": "bar baz"})
        assert r.exit_code == 0 and r.output == "/tmp\nbar baz\n"
        r = await box.exec("pwd", timeout=30)
        assert r.output == "/testbed\n"
        r = await box.exec("kill -TERM $$", timeout=30)
        assert r.exit_code != 0 and not r.timed_out

    asyncio.run(body())


_PROCS = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done"


def test_timeout_kills_the_whole_process_group(box):
    async def body():
        r = await box.exec("sleep 271 & sleep 272; echo never", timeout=2)
        assert r.timed_out and "never" not in r.output
        procs = (await box.exec(_PROCS, timeout=30)).output
        assert "sleep 271" not in procs and "sleep 272" not in procs
        # a command that returns normally takes its background children with it
        r = await box.exec("sleep 273 & echo started", timeout=30)
        assert r.exit_code == 0 and r.output == "started\n" and not r.timed_out
        assert "sleep 273" not in (await box.exec(_PROCS, timeout=30)).output
        # and the sandbox is still usable after a timeout
        assert (await box.exec("echo ok", timeout=30)).output == "ok\n"

    asyncio.run(body())


def test_a_command_the_group_kill_cannot_end_is_ended_by_a_restart_that_keeps_the_files(image, run_id):
    """At a timeout the group kill is itself an exec; when it cannot end the command (here the command points the
    sandbox's process-group file at a pid that does not exist; a fork bomb leaves the kill no pid to start with),
    the sandbox restarts the container: every process ends, the files stay, and the sandbox goes on."""

    async def body():
        async with _box(image, run_id) as sb:
            await sb.write_file("/testbed/kept.txt", "edit\n")
            r = await sb.exec("for f in /tmp/.qwen-swe-pg-*; do echo 99999 > $f; done; sleep 275", timeout=2)
            assert r.timed_out and r.seconds < 2 + 3 * KILL_GRACE + RESTART_GRACE
            assert "sleep 275" not in (await sb.exec(_PROCS, timeout=30)).output
            assert (await sb.exec("cat kept.txt", timeout=30)).output == "edit\n"

    asyncio.run(body())


def test_output_cap_keeps_head_and_tail(box):
    async def body():
        r = await box.exec("echo HEAD; head -c 1000000 /dev/zero | tr '\\0' x; echo; echo TAIL", timeout=30)
        assert r.truncated and r.exit_code == 0
        assert r.output.startswith("HEAD\n") and r.output.endswith("TAIL\n")
        assert "bytes truncated" in r.output and len(r.output) < 64 * 1024 + 100

    asyncio.run(body())


def test_read_write_files(box):
    async def body():
        blob = bytes(range(256)) * 4
        await box.write_file("/data/deep/dir/blob.bin", blob, mode=0o600)
        assert await box.read_file("/data/deep/dir/blob.bin") == blob
        await box.write_file("/tmp/run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
        assert (await box.exec("stat -c %a /data/deep/dir/blob.bin; /tmp/run.sh", 30)).output == "600\nran\n"
        with pytest.raises(SandboxError, match="does not exist"):
            await box.read_file("/no/such/file")
        with pytest.raises(SandboxError, match="absolute path"):
            await box.write_file("relative.txt", "x")

    asyncio.run(body())


def test_git_diff_with_new_files_and_exclude(box):
    async def body():
        tracked = (await box.exec("git ls-files | grep '\\.py$' | head -1", 30)).output.strip()
        assert tracked, "the task image has no tracked python file in /testbed"
        await box.exec(
            f"echo '# changed' >> {tracked}; echo 'x = 1' > brand_new.py; "
            "mkdir -p .harness && echo secret > .harness/notes.txt; echo p > PROBLEM.md",
            30,
        )
        diff = await box.git_diff(exclude=[".harness/", "PROBLEM.md"])
        assert f"+++ b/{tracked}" in diff and "+# changed" in diff
        assert "+++ b/brand_new.py" in diff and "+x = 1" in diff
        assert ".harness" not in diff and "PROBLEM.md" not in diff
        assert "PROBLEM.md" in await box.git_diff()

    asyncio.run(body())


_FUTURE_REPO = r"""
set -e
git config --global user.email t@t; git config --global user.name t; git config --global init.defaultBranch main
mkdir /repo && cd /repo && git init -q
echo base > f.txt && git add f.txt && git commit -qm base
git rev-parse HEAD > /base_sha
echo future > f.txt && git commit -qam FUTURE-FIX && git rev-parse HEAD > /future_sha
git tag v-future; git tag -a v-annotated -m annotated
git checkout -qb side && echo side > g.txt && git add g.txt && git commit -qm SIDE && git rev-parse HEAD > /side_sha
git checkout -q main && git reset -q --hard "$(cat /base_sha)"
git update-ref refs/remotes/origin/main "$(cat /future_sha)"
git update-ref refs/notes/commits "$(cat /side_sha)"
echo stashed > f.txt && git stash -q
git rev-list --all --reflog | wc -l
"""


def test_hide_future_removes_every_later_commit(image, run_id, docker_client):
    tag = f"qwen-swe-test/hide-future:{uuid.uuid4().hex[:8]}"

    async def body():
        async with _box(image, run_id, workdir="/") as sb:
            r = await sb.exec(_FUTURE_REPO, timeout=60)
            assert r.exit_code == 0 and int(r.output.split()[-1]) >= 5, r.output
            shas = {n: (await sb.read_file(f"/{n}_sha")).decode().strip() for n in ("base", "future", "side")}
            await asyncio.to_thread(docker_client.containers.get(sb.name).commit, *tag.split(":"))
        async with _box(tag, run_id, workdir="/repo", base_commit=shas["base"], hide_future=True) as sb:
            r = await sb.exec(
                "git rev-list --all --reflog; git tag; git branch -a; git stash list; "
                "git cat-file --batch-all-objects --batch-check",
                timeout=60,
            )
            assert r.output.split()[0] == shas["base"]
            assert shas["future"] not in r.output and shas["side"] not in r.output
            assert "v-future" not in r.output and "side" not in r.output.replace(shas["base"], "")
            for sha in (shas["future"], shas["side"]):
                assert (await sb.exec(f"git cat-file -t {sha}", timeout=30)).exit_code != 0
            assert (await sb.read_file("/repo/f.txt")) == b"base\n"  # the working tree is untouched
        with pytest.raises(SandboxError, match="not base_commit"):
            async with _box(tag, run_id, workdir="/repo", base_commit=shas["future"], hide_future=True):
                pass

    try:
        asyncio.run(body())
    finally:
        docker_client.images.remove(tag, force=True)


def test_labels_and_limits_in_container_attrs(image, run_id, docker_client):
    async def body():
        async with _box(
            image,
            run_id,
            role="probe",
            cpus=0.5,
            memory="300m",
            env={"A": "1"},
            mounts={str(REPO_ROOT / "examples"): "/mnt/examples"},
        ) as sb:
            attrs = docker_client.containers.get(sb.name).attrs
            labels = attrs["Config"]["Labels"]
            assert labels[LABEL] == "1" and labels[f"{LABEL}.run"] == run_id and labels[f"{LABEL}.role"] == "probe"
            assert attrs["HostConfig"]["NanoCpus"] == 500_000_000
            assert attrs["HostConfig"]["Memory"] == 300 * 1024 * 1024
            assert attrs["HostConfig"]["NetworkMode"] == "none"
            r = await sb.exec("echo $A; ls /mnt/examples/qwen_swe/rewards.py", 30)
            assert r.output == "1\n/mnt/examples/qwen_swe/rewards.py\n"
            r = await sb.exec("touch /mnt/examples/x", 30)
            assert r.exit_code != 0 and "Read-only" in r.output

    asyncio.run(body())


def test_removed_on_exception_and_on_cancellation(image, run_id, docker_client):
    names = []

    async def failing():
        async with _box(image, run_id) as sb:
            names.append(sb.name)
            raise ValueError("boom")

    with pytest.raises(ValueError):
        asyncio.run(failing())
    assert not _exists(docker_client, names[-1])

    async def cancelled():
        started = asyncio.Event()

        async def work():
            async with _box(image, run_id) as sb:
                names.append(sb.name)
                started.set()
                await sb.exec("sleep 300", timeout=600)

        task = asyncio.create_task(work())
        await started.wait()
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # cancelled while booting: the container being created is removed as well
        box = _box(image, run_id)
        boot = asyncio.create_task(box.__aenter__())
        await asyncio.sleep(0.05)
        boot.cancel()
        with pytest.raises(asyncio.CancelledError):
            await boot
        names.append(box.name)

    asyncio.run(cancelled())
    assert not _exists(docker_client, names[-2]) and not _exists(docker_client, names[-1])


def test_missing_image_and_exec_after_stop(run_id):
    async def body():
        with pytest.raises(SandboxError, match="taskpack build"):
            async with _box("qwen-swe-test/no-such-image:none", run_id):
                pass
        with pytest.raises(SandboxError, match="not running"):
            await _box("whatever", run_id).exec("true", 5)

    asyncio.run(body())


class _CountingSemaphore(asyncio.Semaphore):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.holders = self.peak = 0

    async def acquire(self) -> bool:
        await super().acquire()
        self.holders += 1
        self.peak = max(self.peak, self.holders)
        return True

    def release(self) -> None:
        self.holders -= 1
        super().release()


def test_boot_concurrency_is_bounded_and_reap_removes_leftovers(image, run_id, docker_client):
    other = f"{run_id}-other"

    async def body():
        sem = _CountingSemaphore(1)
        boxes = [_box(image, run_id, boot_limit=sem) for _ in range(2)]
        await asyncio.gather(*(b.start() for b in boxes))  # started, never stopped: leftovers
        assert sem.peak == 1
        keep = _box(image, other)
        await keep.start()
        return boxes, keep

    boxes, keep = asyncio.run(body())
    assert reap(run_id) == 2
    assert all(not _exists(docker_client, b.name) for b in boxes)
    assert _exists(docker_client, keep.name)
    assert reap(other) == 1


def test_reap_removes_a_runs_containers_side_by_side(image, run_id, docker_client, monkeypatch):
    """A stopping run waits for its sweep, and on a loaded engine each removal waits mostly on Docker: the removals
    must be in flight together. Each one here waits at a barrier that only all three together pass."""
    for _ in range(3):
        docker_client.containers.run(
            image, entrypoint=["sleep", "infinity"], command=[], detach=True, labels=labels_for(run_id, "test")
        )
    barrier, real_remove = threading.Barrier(3, timeout=60), Container.remove

    def remove_together(self, **kwargs):
        barrier.wait()  # BrokenBarrierError if the removals came one after another
        return real_remove(self, **kwargs)

    monkeypatch.setattr(Container, "remove", remove_together)
    assert reap(run_id) == 3
    assert containers_of(docker_client, run_id) == []


_RUNNER = """
import asyncio, sys
from qwen_swe.sandbox.docker import DockerSandbox
async def main():
    async with DockerSandbox(sys.argv[1], run_id=sys.argv[2], network="none", hide_future=False) as sb:
        print("up", sb.name, flush=True)
        await sb.exec("sleep 600", timeout=900)
asyncio.run(main())
"""


def test_sigkilled_runner_leaves_nothing_after_reap(image, run_id, docker_client):
    proc = subprocess.Popen(
        [sys.executable, "-c", _RUNNER, image, run_id], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("up "), line
        time.sleep(0.5)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert len(containers_of(docker_client, run_id)) == 1  # the killed runner's leftover
    assert reap(run_id) == 1
    assert containers_of(docker_client, run_id) == []


_CREATOR = """
import sys, docker
from qwen_swe.sandbox.docker_host import announced, labels_for
image, run_id, name, driver = sys.argv[1:]
client = docker.from_env(timeout=600)
with announced(run_id, name):  # as DockerSandbox creates: its container mounts a new volume of the holding plugin
    client.api.create_container(
        image, command=["true"], name=name, labels=labels_for(run_id, "rollout"),
        host_config=client.api.create_host_config(binds=[f"{name}:/held"], volume_driver=driver),
    )
"""


def test_reap_waits_for_a_create_a_killed_process_left_in_flight(image, run_id, docker_client):
    """A process killed in the middle of a container create leaves the request to the engine, and the container
    lands after the process is gone (a trainer rank ends at once on SIGTERM). A volume plugin holds the create in
    flight (``tests/held_create.py``), so the sweep certainly starts before the container exists: it must wait for
    it and remove it, and never return while the create is held."""
    name = f"{LABEL}-rollout-{uuid.uuid4().hex[:12]}"
    with ThreadPoolExecutor(1) as pool, held_creates(docker_client) as plugin:
        proc = subprocess.Popen([sys.executable, "-c", _CREATOR, image, run_id, name, plugin.driver], cwd=REPO_ROOT)
        try:
            assert plugin.reached.wait(300), "the engine never asked the plugin for the container's volume"
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        assert not _exists(docker_client, name)  # in flight: the name is reserved, the container not there yet
        sweep = pool.submit(reap, run_id)
        with pytest.raises(TimeoutError):  # a sweep that does not wait returns 0 here, and the container lands later
            sweep.result(timeout=3)
        plugin.release()
        assert sweep.result(timeout=300) == 1
        assert not _exists(docker_client, name)
        assert not list(Path(tempfile.gettempdir()).glob(f"{ANNOUNCE_PREFIX}*.{name}")), "its announcement stayed"
