"""Shared integration fixtures. ``embedded_vllm``: one real embedded vLLM CPU server per test session.

Use it from a test marked ``@pytest.mark.vllm`` (so it is skipped, or failed under CI, when vLLM is not set up).
It yields the OpenAI base URL (``http://127.0.0.1:PORT/v1``); the model is served as ``smollm2-135m`` and also under
the converted folder's path (``paths.embedded_model_dir()``). Tests that reload weights must restore the original
folder before they end. Set EMBEDDED_VLLM_URL to reuse a server that is already running (faster local iteration).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from qwen_swe.config import settings as config
from qwen_swe.sandbox.docker_host import LABEL, reap


@pytest.fixture(scope="session")
def embedded_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if os.environ.get("EMBEDDED_VLLM_URL"):
        yield os.environ["EMBEDDED_VLLM_URL"]
        return
    from qwen_swe.inference.embedded_server import embedded_server

    settings = config.load_settings([], env={})
    with embedded_server(settings, log_dir=tmp_path_factory.mktemp("vllm-logs"), startup_timeout=900) as url:
        yield url


@pytest.fixture
def run_id() -> Iterator[str]:
    """A run id for this test alone; teardown proves the test left no container of it behind."""
    rid = f"test-{uuid.uuid4().hex[:10]}"
    yield rid
    assert reap(rid) == 0, f"the test left containers labelled {LABEL}.run={rid}"
