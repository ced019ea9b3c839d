"""``supervise.run_rank``, a torchrun worker's entry: the exit status the interpreter would give, printed errors,
no interpreter finalization (where gloo's threads can abort a finished rank), and a native crash that says where
the Python threads were."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from qwen_swe.paths import REPO_ROOT
from qwen_swe.supervise import FAULT_DIR_ENV, failures

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


def test_the_first_failure_is_the_cause(tmp_path):
    """A rank that lost its peer may fail after it, in native code too (gloo aborts on a closed connection): only a
    native crash that came first starts the trainer again."""
    notes = {"rank1.native": ("Fatal Python error: Aborted", 20.0), "rank0.error": ("ValueError: x", 10.0)}
    for name, (text, at) in notes.items():
        (tmp_path / name).write_text(text)
        os.utime(tmp_path / name, (at, at))
    (tmp_path / "rank2.native").write_text("")  # a rank that did not crash
    found = failures(tmp_path)
    assert [(f.rank, f.native) for f in found] == [("rank0", False), ("rank1", True)]
    assert not (tmp_path / "rank2.native").exists()
    os.utime(tmp_path / "rank1.native", (5.0, 5.0))
    assert failures(tmp_path)[0] == ("rank1", True, 5.0, "Fatal Python error: Aborted")


def test_a_rank_notes_how_it_failed_under_the_fault_folder(tmp_path):
    for action, note in [("import ctypes; ctypes.string_at(0)", "native"), ("raise KeyError('boom')", "error")]:
        folder = tmp_path / note
        env = {**os.environ, FAULT_DIR_ENV: str(folder), "RANK": "3"}
        proc = subprocess.run(
            [sys.executable, "-c", BODY.format(action=action)], cwd=REPO_ROOT, env=env, capture_output=True, timeout=60
        )
        assert proc.returncode != 0
        (found,) = failures(folder)
        assert found.rank == "rank3" and found.native == (note == "native")
        assert ("in main" if note == "native" else "KeyError: 'boom'") in found.text
    assert failures(tmp_path / "none") == []
