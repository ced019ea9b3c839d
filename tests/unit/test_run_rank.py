"""``supervise.run_rank``, a torchrun worker's entry: the exit status the interpreter would give, printed errors,
no interpreter finalization (where gloo's threads can abort a finished rank), and a native crash that says where
the Python threads were."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from qwen_swe.paths import REPO_ROOT

BODY = """
import atexit, sys
from qwen_swe.supervise import run_rank
atexit.register(lambda: print("finalized"))
def main():
    print("worked")
    {action}
run_rank(main)
"""


@pytest.mark.parametrize(
    "action, status, err",
    [
        ("return None", 0, ""),
        ("return 3", 3, ""),
        ("raise KeyError('boom')", 1, "KeyError: 'boom'"),
        ("sys.exit('bad input')", 1, "bad input"),
        ("sys.exit(4)", 4, ""),
    ],
)
def test_the_status_and_the_error_are_the_interpreters_and_finalization_is_skipped(action, status, err):
    proc = subprocess.run(
        [sys.executable, "-c", BODY.format(action=action)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == status
    assert proc.stdout == "worked\n"  # flushed before leaving; the atexit handler never ran
    assert err in proc.stderr


def test_a_native_crash_prints_the_python_stacks():
    """A rank killed by SIGSEGV in native code (once in a test pass: gloo's run-loop thread, in libc, on a resumed
    rank 0) prints where its Python threads were before it dies by the same signal."""
    proc = subprocess.run(
        [sys.executable, "-c", BODY.format(action="import ctypes; ctypes.string_at(0)")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in proc.stderr and "in main" in proc.stderr, proc.stderr
