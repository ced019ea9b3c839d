"""The sandbox's one error type: whatever the Docker engine or its HTTP client raises reaches callers (the rollout
engine, the grader) as ``SandboxError``, an infrastructure failure that drops the sample, never a crash. Checked with
a real Docker client whose engine socket does not exist; a guard (the disk budget) is run around the container's
life and its error replaces the block's."""

from __future__ import annotations

import asyncio

import docker
import pytest

from qwen_swe.errors import DropReason, SandboxError
from qwen_swe.sandbox.docker import DockerSandbox


def test_an_unreachable_engine_is_a_sandbox_error_naming_the_step(tmp_path):
    client = docker.DockerClient(base_url=f"unix://{tmp_path}/no-engine.sock", version="1.41", timeout=5)
    box = DockerSandbox("qwen-swe-test-image:none", run_id="errors", client=client)
    with pytest.raises(SandboxError, match=r"Docker engine failed during start of .*qwen-swe-test-image:none") as info:
        asyncio.run(box.start())
    assert info.value.reason == DropReason.SANDBOX
    client.close()


class _Guard:
    """A stand-in for ``DiskBudget``: records its turn, and at exit raises what it guards against."""

    def __init__(self, name: str, events: list, fail_enter: bool = False) -> None:
        self.name, self.events, self.fail_enter = name, events, fail_enter

    async def __aenter__(self) -> _Guard:
        self.events.append("guard on")
        if self.fail_enter:
            raise SandboxError("cannot watch")
        return self

    async def __aexit__(self, kind, exc, tb) -> None:
        self.events.append("guard off")
        raise SandboxError(f"{self.name} wrote past its budget") from exc


def _guarded_box(events: list, fail_enter: bool = False) -> DockerSandbox:
    box = DockerSandbox("img", run_id="guard", guard=lambda name: _Guard(name, events, fail_enter))

    async def start() -> None:
        events.append("start")

    async def stop() -> None:
        events.append("stop")

    box.start, box.stop = start, stop  # the container is not needed to check the order
    return box


def test_a_guard_runs_while_the_container_does_and_its_error_replaces_the_blocks():
    events: list = []

    async def body() -> None:
        async with _guarded_box(events) as box:
            events.append("body")
            raise RuntimeError(f"{box.name}: a command failed once the guard killed it")

    with pytest.raises(SandboxError, match="wrote past its budget") as info:
        asyncio.run(body())
    assert events == ["start", "guard on", "body", "guard off", "stop"]
    assert isinstance(info.value.__cause__, RuntimeError)


def test_a_guard_that_cannot_start_removes_the_container():
    events: list = []

    async def body() -> None:
        async with _guarded_box(events, fail_enter=True):
            events.append("body")

    with pytest.raises(SandboxError, match="cannot watch"):
        asyncio.run(body())
    assert events == ["start", "guard on", "stop"]
