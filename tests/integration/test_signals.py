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
        print("stopping", flush=True)
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


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


def _parent(child: str, grace: float = 30.0) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", PARENT, child, str(grace)], stdout=subprocess.PIPE, text=True, env=_env(), cwd=REPO_ROOT
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
        # the first signal handled before the second is sent: two pending SIGTERMs would merge into one
        assert proc.stdout.readline().strip() == "stopping"
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


# A stop signal that Python handles inside an at-fork hook: the hook's exception is "ignored" (printed, not raised).
LOST_IN_A_HOOK = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    from qwen_swe.supervise import Interrupted, install
    install()
    os.register_at_fork(after_in_parent=lambda: os.kill(os.getpid(), signal.SIGTERM))
    try:
        subprocess.run(["true"], preexec_fn=lambda: None)  # a preexec_fn runs the at-fork hooks
        time.sleep(10)  # the signal is long handled by then
    except Interrupted as stop:
        sys.exit(stop.exit_code)
""")
# A stop signal sent while the supervisor forks a child: the child must be registered, stopped, and not inherit the
# blocked signals.
DURING_SPAWN = textwrap.dedent("""
    import os, signal, sys
    from qwen_swe.supervise import SUPERVISOR, Interrupted, install
    install()
    os.register_at_fork(before=lambda: os.kill(os.getpid(), signal.SIGTERM))
    try:
        SUPERVISOR.spawn([sys.executable, "-c", "import time; time.sleep(600)"])
    except Interrupted as stop:
        (child,) = SUPERVISOR.groups
        blocked = [l for l in open(f"/proc/{child}/status") if l.startswith("SigBlk:")][0].split()[1]
        print(child, int(blocked, 16), flush=True)
        sys.exit(stop.exit_code)
""")


def _script(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)


def test_a_stop_signal_handled_where_python_ignores_exceptions_still_stops_the_run():
    proc = _script(LOST_IN_A_HOOK)
    assert proc.returncode == 143, proc.stderr


def test_a_stop_signal_during_a_spawn_raises_once_the_child_is_registered_and_the_child_is_stopped():
    proc = _script(DURING_SPAWN)
    assert proc.returncode == 143, proc.stderr
    assert "Exception ignored" not in proc.stderr  # the signal waited for the fork's hooks to finish
    child, blocked = map(int, proc.stdout.split())
    assert blocked & (1 << (signal.SIGTERM - 1) | 1 << (signal.SIGINT - 1)) == 0, "the child may be stopped"
    wait_gone([child], 5)  # stopped at exit by its registration, though no caller got hold of it
