"""The documentation: the site builds with ``mkdocs build --strict`` (a broken link, a page missing from the nav or
a bad anchor fails it), and the README stays a front door: short, with the two set-up commands CI and the main job
run, and links that resolve."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from qwen_swe.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
COMMANDS = (
    "bash scripts/setup.sh && bash examples/qwen_swe/run_grpo.sh   # the main job, on the embedded default",
    "bash scripts/test.sh                                          # the tests (runs the same set-up first)",
)


def test_the_site_builds_strict(tmp_path):
    """The .venv's mkdocs (requirements.txt pins it and mkdocs-material), offline, into a temporary folder."""
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # material's end-of-life banner
    assert proc.returncode == 0, f"mkdocs build --strict failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
    assert (tmp_path / "site" / "reference" / "settings.html").is_file()


def test_the_readme_is_a_front_door():
    text = README.read_text()
    assert len(text.splitlines()) <= 300, "README.md is over 300 lines: move the detail into a page under docs/"
    for command in COMMANDS:  # CI's .ci/run runs the second; the first is the main job
        assert command in text, f"README.md lost its set-up command: {command}"


def test_the_readmes_links_resolve():
    text = README.read_text()
    targets = [t for t in re.findall(r"\]\(([^)]+)\)", text) if not t.startswith(("http://", "https://", "#"))]
    assert targets, "README.md links to no docs page"
    missing = [t for t in targets if not (REPO_ROOT / t.split("#")[0]).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
