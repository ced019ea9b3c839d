"""Containers for rollouts and grading: the sandbox contract (``base.py``) on Docker; the host around them (client,
images, labels, ``reap``) is ``docker_host.py``.

Why this shape:
- The agent and the grader only need start / exec / read / write / diff / stop, so the contract is that small;
  another backend (Modal, E2B) implements the same six methods.
- The ``docker`` package is blocking, so every call runs in a worker thread (``asyncio.to_thread``); a create or a
  removal is finished even when its task is cancelled: a cancelled rollout never leaks a container it never saw.
- ``exec`` runs the command as the leader of a fresh process group (``setsid``) and, at its timeout or when the
  command returns, kills that whole group: nothing a command started outlives it, except processes that made
  their own session on purpose. Images need ``bash`` and util-linux ``setsid`` (``-w``), as every SWE-bench and
  Debian/Ubuntu image has. The kill is itself an exec, so it cannot start while a fork bomb holds every pid of the
  container's limit; then the container is restarted (its init is killed, so every process in it dies; its files
  stay, so the agent's diff can still be read).
- Removal is ``remove(force=True)`` (SIGKILL), never ``docker stop`` with a grace period: the container only
  runs ``sleep infinity`` (under Docker's init, which reaps the processes ``exec`` kills), so there is nothing
  to shut down gracefully.
- Every container carries labels (``LABEL``, run id, role) and its create is announced, so ``reap`` can remove
  what a killed run left behind, even a container that lands after it died.
- Whatever the engine or its HTTP client raises surfaces as ``SandboxError``, so callers handle one type.
"""

from __future__ import annotations

import asyncio
import functools
import io
import logging
import tarfile
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

import docker
import docker.errors

from qwen_swe.errors import SandboxError
from qwen_swe.paths import TESTBED
from qwen_swe.sandbox import docker_host, exec_stream
from qwen_swe.sandbox.base import ExecResult, Sandbox
from qwen_swe.sandbox.docker_host import ENGINE_ERRORS, LABEL, docker_client, ensure_image, image_for, labels_for
from qwen_swe.sandbox.settings import SandboxSettings
from qwen_swe.sandbox.shell import CHECKOUT_BASE, EXEC_WRAPPER, HIDE_FUTURE, KILL_GROUP, CappedOutput, sh

log = logging.getLogger("qwen_swe.sandbox")
KILL_GRACE = 10.0  # seconds to wait for an exec stream to end after its process group was killed
RESTART_GRACE = 60.0  # seconds a restart may take: Docker reaps every process of the container first
PIDS_LIMIT = 1024  # processes per container: far above a test suite's, low enough that a bomb is cheap to end
_PG_DIR = "/tmp"

T = TypeVar("T")
P = ParamSpec("P")


async def _finish(fn: Callable[[], T]) -> T:
    """Run ``fn`` in a thread and let it finish even if the caller is cancelled (then re-raise the cancel)."""
    task = asyncio.ensure_future(asyncio.to_thread(fn))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        try:
            await task
        except Exception:  # noqa: BLE001 - the cancellation is what the caller must see
            pass
        raise


def _engine_errors(
    method: Callable[Concatenate[DockerSandbox, P], Awaitable[T]],
) -> Callable[Concatenate[DockerSandbox, P], Coroutine[Any, Any, T]]:
    """A sandbox method whose Docker engine failures (API, connection, HTTP timeouts) raise ``SandboxError``."""

    @functools.wraps(method)
    async def wrapped(self: DockerSandbox, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(self, *args, **kwargs)
        except ENGINE_ERRORS as exc:
            raise SandboxError(
                f"the Docker engine failed during {method.__name__} of {self.name} ({self.image}): {exc}"
            ) from exc

    return wrapped


class DockerSandbox(Sandbox):
    """One container from ``image``; see the module docstring for the guarantees."""

    def __init__(
        self,
        image: str,
        *,
        run_id: str,
        role: str = "rollout",
        cpus: float = 1.0,
        memory: str = "4g",
        network: str = "host",
        mounts: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str = TESTBED,
        base_commit: str | None = None,
        hide_future: bool = True,
        boot_limit: asyncio.Semaphore | None = None,
        output_limit: int = 1 << 20,
        client: docker.DockerClient | None = None,
        guard: Callable[[str], AbstractAsyncContextManager[Any]] | None = None,
    ) -> None:
        self.image, self.run_id, self.role = image, run_id, role
        self.cpus, self.memory, self.network = cpus, memory, network
        self.mounts = dict(mounts or {})
        self.env = dict(env or {})
        self.workdir, self.base_commit, self.hide_future = workdir, base_commit, hide_future
        self.boot_limit, self.output_limit = boot_limit, output_limit
        self.name = f"{LABEL}-{role}-{uuid.uuid4().hex[:12]}"
        self._client = client
        self._own_client = client is None
        self._container: Any = None
        self.guard = guard  # given the container's name: entered once it runs, left before it is removed
        self._guarding: AbstractAsyncContextManager[Any] | None = None

    @classmethod
    def for_instance(
        cls,
        settings: SandboxSettings,
        instance: Mapping[str, Any],
        *,
        run_id: str,
        role: str,
        network: str | None = None,
        **kw: Any,
    ) -> DockerSandbox:
        """A sandbox for a SWE-bench row: its image (see ``image_for``), the section's limits and network."""
        return cls(
            image_for(instance, settings.image_namespace),
            run_id=run_id,
            role=role,
            cpus=settings.sandbox_cpus,
            memory=settings.sandbox_memory,
            network=network or settings.sandbox_network,
            **kw,
        )

    # --- lifecycle --------------------------------------------------------------------------
    async def __aenter__(self) -> Self:
        await super().__aenter__()
        if self.guard is not None:
            guarding = self.guard(self.name)
            try:
                await guarding.__aenter__()
            except BaseException:
                await self.stop()
                raise
            self._guarding = guarding
        return self

    async def __aexit__(self, *exc: Any) -> None:
        guarding, self._guarding = self._guarding, None
        try:
            if guarding is not None:  # may raise what it guards against (DiskLimitExceeded), from the block's error
                await guarding.__aexit__(*exc)
        finally:
            await self.stop()

    @_engine_errors
    async def prepare(self) -> None:
        """``ensure_image`` ahead of ``start`` (which checks again, cheaply); a failure releases the client."""
        if self._client is None:
            self._client = await asyncio.to_thread(docker_client)
        try:
            await asyncio.to_thread(ensure_image, self._client, self.image)
        except BaseException:
            await self.stop()
            raise

    @_engine_errors
    async def start(self) -> None:
        if self.boot_limit is None:
            await self._boot()
        else:
            async with self.boot_limit:
                await self._boot()

    async def _boot(self) -> None:
        if self._client is None:
            self._client = await asyncio.to_thread(docker_client)
        await asyncio.to_thread(ensure_image, self._client, self.image)
        await _finish(self._create)
        script = (CHECKOUT_BASE if self.base_commit else "") + (HIDE_FUTURE if self.hide_future else "")
        if script:
            res = await self.exec(sh(script, self.workdir, self.base_commit or ""), timeout=600)
            if res.exit_code != 0:
                raise SandboxError(
                    f"preparing {self.workdir} of {self.image} at base_commit {self.base_commit} "
                    f"failed (exit {res.exit_code}): {res.output[-2000:]}"
                )

    def _create(self) -> None:
        volumes = {host: {"bind": inside, "mode": "ro"} for host, inside in self.mounts.items()}
        try:
            assert self._client is not None  # start() made it
            with docker_host.announced(self.run_id, self.name):  # a sweep waits for it if this process dies inside
                self._container = self._client.containers.run(
                    self.image,
                    entrypoint=["sleep", "infinity"],
                    command=[],
                    detach=True,
                    name=self.name,
                    labels=labels_for(self.run_id, self.role),
                    network_mode=self.network,
                    environment=self.env,
                    working_dir=self.workdir,
                    volumes=volumes,
                    nano_cpus=int(self.cpus * 1e9),
                    mem_limit=self.memory,
                    memswap_limit=self.memory,
                    pids_limit=PIDS_LIMIT,
                    user="root",
                    init=True,
                )
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(f"image {self.image} vanished before its container started: {exc}") from exc
        except docker.errors.APIError as exc:
            raise SandboxError(f"Docker could not start a container from {self.image}: {exc}") from exc

    @_engine_errors
    async def stop(self) -> None:
        """Force-remove the container (found by name, so a half-finished start is covered too)."""
        if self._client is None:
            return
        try:
            await _finish(self._remove)
        finally:
            if self._own_client:
                self._client.close()
                self._client = None

    def _remove(self) -> None:
        try:
            assert self._client is not None  # stop() returns early without one
            target = self._container or self._client.containers.get(self.name)
            target.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if "already in progress" not in str(exc):
                raise SandboxError(f"could not remove container {self.name}: {exc}; `reap` removes it later") from exc
        finally:
            self._container = None

    # --- commands ---------------------------------------------------------------------------
    @_engine_errors
    async def exec(
        self, cmd: str, timeout: float, *, workdir: str | None = None, env: dict[str, str] | None = None
    ) -> ExecResult:
        container = self._require()
        assert self._client is not None  # there is a container, so a client
        pg_file = f"{_PG_DIR}/.{LABEL}-pg-{uuid.uuid4().hex[:12]}"
        api = self._client.api
        t0 = time.monotonic()
        try:
            created = await asyncio.to_thread(
                api.exec_create,
                container.id,
                ["bash", "-c", EXEC_WRAPPER, pg_file, cmd],
                workdir=workdir or self.workdir,
                environment=env or None,
                user="root",
            )
            exec_id = created["Id"]
            stream = await asyncio.to_thread(exec_stream.start, api, exec_id)  # not exec_start: it can lose the head
        except docker.errors.APIError as exc:
            raise SandboxError(
                f"exec in container {self.name} ({self.image}) failed: {exc}; "
                "the container may have crashed or been removed"
            ) from exc
        buf = CappedOutput(self.output_limit)
        reader = asyncio.ensure_future(asyncio.to_thread(_drain, stream, buf))
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(reader), timeout)
        except TimeoutError:
            timed_out = True
            if not await self._end_group(container, pg_file, reader):
                stream.close()  # a process outside the group still holds the pipe: stop listening
                await reader
        except asyncio.CancelledError:
            await asyncio.shield(self._cancel_exec(container, pg_file, stream, reader))
            raise
        exit_code = -1
        if not timed_out:
            try:
                code = (await asyncio.to_thread(api.exec_inspect, exec_id)).get("ExitCode")
            except docker.errors.APIError as exc:
                raise SandboxError(f"container {self.name} ({self.image}) vanished during exec: {exc}") from exc
            exit_code = -1 if code is None else int(code)
        return ExecResult(
            exit_code=exit_code,
            output=buf.text(),
            timed_out=timed_out,
            truncated=buf.dropped > 0,
            seconds=time.monotonic() - t0,
        )

    async def _end_group(self, container: Any, pg_file: str, reader: asyncio.Future) -> bool:
        """Kill the exec's process group and wait for its stream to end; if that fails (the kill's own exec cannot
        start in a container at its pids limit), restart the container. True once the stream ended."""
        steps = ((self._kill_group, KILL_GRACE), (self._restart, RESTART_GRACE))
        for step, bound in steps:
            try:
                await asyncio.wait_for(step(container, pg_file), bound)
            except TimeoutError:
                pass  # the thread goes on; the next step does not need it
            try:
                await asyncio.wait_for(asyncio.shield(reader), KILL_GRACE)
                return True
            except TimeoutError:
                continue
        return False

    @staticmethod
    async def _kill_group(container: Any, pg_file: str) -> None:
        try:
            await asyncio.to_thread(container.exec_run, ["bash", "-c", KILL_GROUP, pg_file], user="root")
        except docker.errors.APIError:
            pass  # the container is gone, and with it the group

    async def _restart(self, container: Any, pg_file: str) -> None:
        log.warning(
            "%s (%s): a command outlived the kill of its process group (no pid left for the kill, or "
            "the group file was changed); restarting the container: its processes end, its files stay",
            self.name,
            self.image,
        )
        try:
            await asyncio.to_thread(container.restart, timeout=0)
        except docker.errors.APIError:
            pass  # the container is gone, and with it the group

    async def _cancel_exec(self, container: Any, pg_file: str, stream: Any, reader: asyncio.Future) -> None:
        try:
            ended = await self._end_group(container, pg_file, reader)
        except Exception:  # noqa: BLE001 - cleanup on cancel must not raise
            ended = False
        if not ended:
            stream.close()

    @_engine_errors
    async def read_file(self, path: str) -> bytes:
        container = self._require()

        def read() -> bytes:
            chunks, _ = container.get_archive(path)
            with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
                member = tar.next()
                f = tar.extractfile(member) if member is not None else None
                if f is None:
                    raise SandboxError(f"{path} in {self.name} is not a regular file")
                return f.read()

        try:
            return await asyncio.to_thread(read)
        except docker.errors.NotFound as exc:
            raise SandboxError(f"{path} does not exist in container {self.name}") from exc
        except docker.errors.APIError as exc:
            raise SandboxError(f"reading {path} from container {self.name} failed: {exc}") from exc

    @_engine_errors
    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Write ``data`` to the absolute ``path`` (parents created), owned by root."""
        container = self._require()
        if not path.startswith("/"):
            raise SandboxError(f"write_file needs an absolute path, got {path!r}")
        raw = data.encode() if isinstance(data, str) else data
        blob = io.BytesIO()
        with tarfile.open(fileobj=blob, mode="w") as tar:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(raw), mode, int(time.time())
            tar.addfile(info, io.BytesIO(raw))
        try:
            ok = await asyncio.to_thread(container.put_archive, "/", blob.getvalue())
        except docker.errors.APIError as exc:
            raise SandboxError(f"writing {path} into container {self.name} failed: {exc}") from exc
        if not ok:
            raise SandboxError(f"writing {path} into container {self.name} failed")

    def _require(self) -> Any:
        if self._container is None:
            raise SandboxError(f"sandbox {self.name} is not running: call start() or use `async with`")
        return self._container


def _drain(stream: Any, buf: CappedOutput) -> None:
    try:
        for chunk in stream:
            buf.add(chunk)
    except Exception:  # noqa: BLE001 - a closed stream ends the read; the caller knows why it closed it
        pass
