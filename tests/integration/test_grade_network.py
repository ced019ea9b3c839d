"""Grading containers have no network unless GRADE_NETWORK says otherwise (issue 41): from inside a real grading
container, a server on the host's loopback is out of reach; with GRADE_NETWORK=host it is reached, and the grade
says so. The probe runs before the eval's test markers, so the verdict is the gold patch's as usual."""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from pathlib import Path

import pytest

from qwen_swe.reward.harness import Grade, grade_async
from qwen_swe.reward.settings import RewardSettings
from qwen_swe.sandbox.docker_host import reap
from qwen_swe.sandbox.settings import SandboxSettings
from tests.task_pack import pack_task, require_images

pytestmark = pytest.mark.docker
START = ": '>>>>> Start Test Output'"


@pytest.fixture()
def host_server():
    """A TCP server on the host's loopback that answers every connection; yields its port."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.5)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield srv.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    srv.close()


def _probe_row(port: int) -> dict:
    row = require_images([pack_task()])[0]
    probe = (
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3)\" "
        "&& echo PROBE-REACHED || echo PROBE-UNREACHABLE; echo PROBE-NETS $(ls /sys/class/net)"
    )
    assert row["eval_script"].count(START) == 1
    return {**row, "eval_script": row["eval_script"].replace(START, f"{probe}\n{START}")}


def _grade(row: dict, tmp_path: Path, run_id: str, **reward: str) -> tuple[Grade, str]:
    g = asyncio.run(
        grade_async(
            row,
            row["patch"],
            reward=RewardSettings(eval_timeout=300.0, **reward),
            sandbox=SandboxSettings(image_namespace=""),
            run_id=run_id,
            log_dir=tmp_path,
        )
    )
    return g, Path(g.details["log_path"]).read_text()


def test_a_grading_container_reaches_nothing_by_default(host_server, tmp_path):
    run_id = f"test-net-{uuid.uuid4().hex[:8]}"
    try:
        g, log = _grade(_probe_row(host_server), tmp_path, run_id)
    finally:
        reap(run_id)
    assert g.resolved and g.reward == 1.0, g.reason
    assert "PROBE-UNREACHABLE" in log and "PROBE-REACHED" not in log
    assert "PROBE-NETS lo\n" in log  # no interface but its own loopback
    assert "network" not in g.details


def test_grade_network_host_is_the_explicit_way_out(host_server, tmp_path):
    run_id = f"test-net-{uuid.uuid4().hex[:8]}"
    try:
        g, log = _grade(_probe_row(host_server), tmp_path, run_id, grade_network="host")
    finally:
        reap(run_id)
    assert g.resolved and "PROBE-REACHED" in log
    assert g.details["network"] == "host"
