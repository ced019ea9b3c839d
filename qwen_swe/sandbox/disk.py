"""A disk budget for rollout containers, kept from outside the container (``SANDBOX_DISK``).

Why a watcher: Docker's own per-container size limit (``--storage-opt size``) works only on overlay2 over xfs with
project quotas; this machine and CI have ext4, where a container may write until the host's disk is full. So the
container's writable layer is measured (``SizeRw``, as ``docker ps --size`` reports it) every ``interval`` seconds,
and past the budget the container is killed: its processes end, the rollout's sandbox call fails, and the sample
is dropped as ``disk_limit``. What it bounds is what the container writes, up to one interval's worth past the budget
(the write rate times the interval), not a hard quota.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import docker
import docker.errors

from qwen_swe.errors import DropReason, SandboxError
from qwen_swe.sandbox.docker_host import DOCKER_TIMEOUT, ENGINE_ERRORS

log = logging.getLogger("qwen_swe.sandbox")


class DiskLimitExceeded(SandboxError):
    reason = DropReason.DISK_LIMIT


def layer_bytes(client: docker.DockerClient, name: str) -> int | None:
    """What the container wrote (its writable layer); None once it is gone."""
    rows = client.api.containers(all=True, size=True, filters={"name": f"^/?{name}$"})
    return int(rows[0].get("SizeRw") or 0) if rows else None


class DiskBudget:
    """``async with DiskBudget(name, limit)`` around what runs in container ``name``: past ``limit`` bytes the container
    is killed and the block raises ``DiskLimitExceeded`` (whatever the kill made the block raise is its cause)."""

    def __init__(self, name: str, limit: int, *, interval: float = 5.0) -> None:
        self.name, self.limit, self.interval = name, limit, interval
        self.exceeded: int | None = None  # bytes measured when the budget was found spent
        self._task: asyncio.Task | None = None
        self._client: Any = None

    async def __aenter__(self) -> DiskBudget:
        if self.limit > 0:
            self._client = await asyncio.to_thread(docker.from_env, timeout=DOCKER_TIMEOUT)
            self._task = asyncio.ensure_future(self._watch())
        return self

    async def __aexit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._client is not None:
            self._client.close()
        if self.exceeded is not None and not isinstance(exc, asyncio.CancelledError):
            raise DiskLimitExceeded(
                f"container {self.name} wrote {self.exceeded >> 20} MiB, past SANDBOX_DISK "
                f"({self.limit >> 20} MiB); it was killed"
            ) from exc

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                used = await asyncio.to_thread(layer_bytes, self._client, self.name)
            except ENGINE_ERRORS as exc:  # a slow engine is no reason to stop a rollout: measure again later
                log.warning("disk budget of %s: could not measure (%s)", self.name, exc)
                continue
            if used is None:
                return
            if used > self.limit:
                self.exceeded = used
                try:
                    await asyncio.to_thread(self._client.api.kill, self.name)
                except docker.errors.APIError as exc:  # already stopped or gone: nothing left to stop
                    log.debug("kill of %s: %s", self.name, exc)
                return
