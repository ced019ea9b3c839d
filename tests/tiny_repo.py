"""A two-function repository with two tests: the generator's mutations and its judge, in seconds."""

from __future__ import annotations

from pathlib import Path


def tiny_repo(root: Path) -> Path:
    repo = root / "tinyrepo"
    (repo / "tiny").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "tiny" / "__init__.py").write_text("")
    (repo / "tiny" / "ops.py").write_text("def add(a, b):\n    return a + b\n\n\ndef unused(x):\n    return x * 3\n")
    (repo / "tests" / "test_ops.py").write_text(
        "from tiny.ops import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_add_zero():\n    assert add(0, 0) == 0\n"
    )
    return repo
