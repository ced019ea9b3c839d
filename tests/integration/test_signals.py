"""Stops that leave nothing behind, with real processes: the supervisor on its own. The whole run signalled at
several phases is the first part of ``tests/e2e/test_embedded_run.py``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from qwen_swe.paths import REPO_ROOT
from tests.run_stops import alive, wait_gone

PARENT = textwrap.dedent("""
    import signal, sys, time
    from qwen_swe.supervise import SUPERVISOR, Interrupted, install
    install()
    child = SUPERVISOR.spawn([sys.executable, "-c", sys.argv[1]])
    try:
        print(child.pid, flush=True)
        while True:
            time.sleep(0.1)
    except Interrupted as stop:
        code = stop.exit_code
    finally:
        SUPERVISOR.stop(child, grace=float(sys.argv[2]))
    sys.exit(code)
""")
SLEEPER = "import time\nwhile True: time.sleep(0.1)"
# says "ignoring" on the shared stdout once its handler is in place, so the test signals it only then
STUBBORN = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ignoring', flush=True)\n"
    "while True: time.sleep(0.1)"
)


def _parent(child: str, grace: float = 30.0) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", PARENT, child, str(grace)], stdout=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT
    )
    return proc, int(proc.stdout.readline())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_stops_the_children_and_says_so_in_the_exit_code(sig):
    proc, child = _parent(SLEEPER)
    try:
        assert alive(child)
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 128 + sig
        wait_gone([child], 5)
    finally:
        proc.kill()


def test_a_second_signal_does_not_wait_for_a_child_that_ignores_the_first():
    proc, child = _parent(STUBBORN, grace=120.0)
    try:
        assert proc.stdout.readline().strip() == "ignoring"
        proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        assert proc.poll() is None and alive(child), "the first signal waits for the child (grace 120 s)"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143
        wait_gone([child], 30)
        assert time.monotonic() - t0 < 60  # far below the child's 120 s grace, however busy the machine
    finally:
        proc.kill()


def test_children_die_with_a_parent_killed_by_sigkill():
    proc, child = _parent(SLEEPER)
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        wait_gone([child], 10)
    finally:
        proc.kill()
