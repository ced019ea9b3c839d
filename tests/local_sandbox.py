"""A second sandbox backend for tests: local subprocesses in a private root, no Docker.

It shows that the grader needs only ``qwen_swe.sandbox.base``: a machine is a temporary folder holding its own
``/testbed``, ``/tmp`` and ``/root``, with the host's ``/usr`` and ``/etc`` and the interpreter running the tests
(its prefixes, first on PATH: the eval scripts' ``python3 -m pytest``) bound read-only; every command runs
chrooted into it inside fresh mount, network and PID namespaces (``unshare``), so the eval script's absolute paths
(``/testbed``, ``/eval.sh``, ``/tmp/patch.diff``) are the machine's own, it has no network, and nothing it starts
outlives the command; the request's mounts are bound read-only, its disk budget is not kept (no backend but Docker's
measures one). Needs root and util-linux ``unshare``. It isolates paths, not privileges: a test double for
trusted test code, never a place for untrusted patches (the Docker sandbox is).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwen_swe.errors import SandboxError
from qwen_swe.paths import TESTBED
from qwen_swe.sandbox.base import ExecResult, Sandbox, SandboxRequest
from qwen_swe.sandbox.shell import CHECKOUT_BASE, CappedOutput, sh

PYTHON_DIRS = sorted({p for p in (sys.prefix, sys.base_prefix) if not p.startswith("/usr/")})
READ_ONLY = ("/usr", "/etc", *PYTHON_DIRS)
BASE_ENV = {
    "PATH": f"{sys.prefix}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
}


def _setup(root: Path, mounts: Mapping[str, str]) -> str:
    """The mounts of one command's private root (they vanish with its mount namespace): the host's read-only
    folders and the request's (host folder -> path inside), read-only too."""
    pairs = [(d, d) for d in READ_ONLY] + list(mounts.items())
    binds = [
        f"mount --bind {shlex.quote(host)} {shlex.quote(f'{root}{inside}')} && "
        f"mount -o remount,bind,ro {shlex.quote(f'{root}{inside}')}"
        for host, inside in pairs
    ]
    r = shlex.quote(str(root))
    return " && ".join([*binds, f"mount --rbind /dev {r}/dev", f"mount -t proc proc {r}/proc"])


def namespaces_missing() -> str | None:
    """Why the double cannot run here (None: it can)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "the local sandbox double needs root and util-linux unshare"
    probe = subprocess.run(["unshare", "--mount", "--net", "--pid", "--fork", "true"], capture_output=True, timeout=30)
    return None if probe.returncode == 0 else f"unshare is refused here: {probe.stderr.decode(errors='replace')}"


class LocalSandbox(Sandbox):
    """One private root; ``testbed(instance, folder)`` fills its ``/testbed`` at start."""

    def __init__(self, request: SandboxRequest, testbed: Callable[[Mapping[str, Any], Path], None]) -> None:
        self.request, self.testbed = request, testbed
        self.image = f"local:{request.instance.get('instance_id')}"
        self.root: Path | None = None

    async def start(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="qwen-swe-local-"))
        for d in ("dev", "proc", "tmp", "root", TESTBED, *READ_ONLY, *self.request.mounts.values()):
            (self.root / d.lstrip("/")).mkdir(parents=True, exist_ok=True)
        for link in ("bin", "sbin", "lib", "lib64"):  # merged-/usr hosts: the links lead into the bound /usr
            if Path("/", link).is_symlink():
                (self.root / link).symlink_to(f"usr/{link}")
        await asyncio.to_thread(self.testbed, self.request.instance, self.root / TESTBED.lstrip("/"))
        if self.request.base_commit:
            res = await self.exec(sh(CHECKOUT_BASE, TESTBED, self.request.base_commit), timeout=120)
            if res.exit_code != 0:
                raise SandboxError(f"checking out {self.request.base_commit} failed: {res.output[-2000:]}")

    async def exec(
        self, cmd: str, timeout: float, *, workdir: str | None = None, env: dict[str, str] | None = None
    ) -> ExecResult:
        root = self._require()
        inner = f"cd {shlex.quote(workdir or TESTBED)} && {cmd}"
        chroot = f"exec chroot {shlex.quote(str(root))} /bin/bash -c {shlex.quote(inner)}"
        script = f"{_setup(root, self.request.mounts)} && {chroot}"
        t0 = time.monotonic()
        isolated = ["--net"] if self.request.network in (None, "none") else []  # else the host's, as Docker's host
        proc = await asyncio.create_subprocess_exec(
            "unshare",
            "--mount",
            *isolated,
            "--pid",
            "--fork",
            "--kill-child",
            "sh",
            "-c",
            script,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**BASE_ENV, **(env or {})},
            start_new_session=True,
        )
        buf = CappedOutput(self.request.output_limit)
        timed_out = False
        try:
            await asyncio.wait_for(self._drain(proc, buf), timeout)
        except TimeoutError:
            timed_out = True
        finally:
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        return ExecResult(
            exit_code=-1 if timed_out else proc.returncode,
            output=buf.text(),
            timed_out=timed_out,
            truncated=buf.dropped > 0,
            seconds=time.monotonic() - t0,
        )

    @staticmethod
    async def _drain(proc: asyncio.subprocess.Process, buf: CappedOutput) -> None:
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(1 << 16):
            buf.add(chunk)
        await proc.wait()

    async def read_file(self, path: str) -> bytes:
        try:
            return self._host(path).read_bytes()
        except OSError as exc:
            raise SandboxError(f"{path} cannot be read from {self.image}: {exc}") from exc

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        target = self._host(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)
        target.chmod(mode)

    async def stop(self) -> None:
        if self.root is not None:
            await asyncio.to_thread(shutil.rmtree, self.root, True)
            self.root = None

    def _host(self, path: str) -> Path:
        if not path.startswith("/"):
            raise SandboxError(f"a sandbox path must be absolute, got {path!r}")
        return self._require() / path.lstrip("/")

    def _require(self) -> Path:
        if self.root is None:
            raise SandboxError(f"sandbox {self.image} is not running: call start() or use `async with`")
        return self.root


@dataclass(frozen=True)
class LocalSandboxes:
    """The ``SandboxFactory`` of the double; ``made`` collects every machine it handed out, for the tests to inspect."""

    testbed: Callable[[Mapping[str, Any], Path], None]
    made: list[SandboxRequest]

    def __call__(self, request: SandboxRequest) -> LocalSandbox:
        self.made.append(request)
        return LocalSandbox(request, self.testbed)
