"""Fixtures of the unit layer."""

from __future__ import annotations

import pytest
import torch.distributed as dist


@pytest.fixture(scope="module")
def world_of_one():
    """A single-process gloo world, for FSDP2 on one rank; one per module, torn down after it."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
