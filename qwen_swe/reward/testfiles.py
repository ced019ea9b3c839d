"""What counts as a test file: the one definition the grader's tampering filter and the task pack share.

A path is a test file when it sits under a ``tests``/``test``/``testing`` directory or is named ``test_*.py``,
``*_test.py`` or ``tests.py``; files that configure or hook pytest or the interpreter (``conftest.py``,
``pytest.ini``, ``tox.ini``, ``sitecustomize.py``, ``*.pth``, ...) count with them.
"""

from __future__ import annotations

from pathlib import PurePosixPath

TEST_DIRS = frozenset({"tests", "test", "testing"})
HOOK_FILES = frozenset(
    {
        "conftest.py",
        "pytest.ini",
        ".pytest.ini",
        "pytest.toml",
        ".pytest.toml",
        "tox.ini",
        "sitecustomize.py",
        "usercustomize.py",
    }
)
CONFIG_FILES = frozenset({"setup.cfg", "pyproject.toml"})  # only their pytest sections count


def test_path_reason(path: str) -> str | None:
    """Why ``path`` is a test file ("test directory", "test file", "test hook or config file"), or None."""
    pp = PurePosixPath(path)
    name = pp.name
    if name in HOOK_FILES or name.endswith(".pth"):
        return "test hook or config file"
    if any(part in TEST_DIRS for part in pp.parts[:-1]):
        return "test directory"
    if name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py") or name == "tests.py"):
        return "test file"
    return None


def is_test_path(path: str) -> bool:
    return test_path_reason(path) is not None
