"""The lint gate: ruff (format and lint) over all the project's Python and mypy over the library pass, with the
pinned tools of .venv and the settings of pyproject.toml. Locally: the three commands below, or this file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from qwen_swe.paths import REPO_ROOT, cache_home

BIN = Path(sys.executable).parent
PYTHON_TREES = ["qwen_swe", "examples", "benchmarks", "tests", "scripts"]


def _run(*argv: str, timeout: float) -> None:
    tool = BIN / argv[0]
    if not tool.exists():
        pytest.fail(f"{tool} is missing: `bash scripts/setup.sh` installs requirements.txt (ruff, mypy) into .venv")
    done = subprocess.run([str(tool), *argv[1:]], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"`{' '.join(argv)}` failed:\n{done.stdout}{done.stderr}"


def test_ruff_format():
    _run("ruff", "format", "--check", *PYTHON_TREES, timeout=120)


def test_ruff_lint():
    _run("ruff", "check", *PYTHON_TREES, timeout=120)


def test_mypy_on_the_library():
    # the files and options are pyproject.toml's [tool.mypy]. The cache lives with the set-up's other caches, so a
    # fresh clone reuses it: mypy checks each entry against its source's hash (106 s of CPU cold, 3 s warm here)
    _run("mypy", "--cache-dir", str(cache_home() / "mypy"), timeout=600)
