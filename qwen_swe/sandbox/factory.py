"""The Docker ``SandboxFactory``: what a caller that makes machines (the rollout engine, the grader) is handed when it
is given none. A request's disk budget is kept by ``DiskBudget`` for as long as the container is entered."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass

import docker

from qwen_swe.sandbox.base import SandboxRequest
from qwen_swe.sandbox.disk import DiskBudget
from qwen_swe.sandbox.docker import DockerSandbox
from qwen_swe.sandbox.settings import SandboxSettings


@dataclass(frozen=True)
class DockerSandboxes:
    """Containers with the section's image names and limits; ``client`` and ``boot_limit`` are shared by all of them
    (None: each container opens and closes its own client; starts are not bounded)."""

    settings: SandboxSettings
    client: docker.DockerClient | None = None
    boot_limit: asyncio.Semaphore | None = None

    def __call__(self, request: SandboxRequest) -> DockerSandbox:
        return DockerSandbox.for_instance(
            self.settings,
            request.instance,
            run_id=request.run_id,
            role=request.role,
            network=request.network,
            base_commit=request.base_commit,
            hide_future=request.hide_future,
            output_limit=request.output_limit,
            boot_limit=self.boot_limit,
            client=self.client,
            mounts=request.mounts,
            guard=functools.partial(DiskBudget, limit=request.disk_limit) if request.disk_limit > 0 else None,
        )
