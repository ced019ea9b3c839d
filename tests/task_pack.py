"""The local task pack for integration tests: a missing pack or image skips locally and fails under CI."""

from __future__ import annotations

import os

import pytest

BUILD_HINT = "build them with `.venv/bin/python -m qwen_swe.data.taskpack build`"


def missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must provide the local task pack: {reason}")
    pytest.skip(reason)
