"""The sandbox's one error type: whatever the Docker engine or its HTTP client raises reaches callers (the rollout
engine, the grader) as ``SandboxError``, an infrastructure failure that drops the sample, never a crash. Checked with
a real Docker client whose engine socket does not exist."""

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
