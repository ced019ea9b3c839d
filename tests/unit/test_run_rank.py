"""``supervise.run_rank``, a torchrun worker's entry: the exit status the interpreter would give, printed errors,
and no interpreter finalization (where gloo's threads can abort a finished rank)."""

from __future__ import annotations

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
