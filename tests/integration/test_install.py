"""``pip install -e .`` into a fresh venv gives the ``qwen-swe`` command, and a wheel carries the task pack, the
viewer page and the other data files. ``--no-deps``: the dependencies come from .venv (a .pth, as in
scripts/setup/35_slime.sh), so nothing as large as torch is installed again; the build backend comes from PyPI."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

from qwen_swe.paths import REPO_ROOT

PIP = ["-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]


def run(cmd: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{cmd}: {out.stdout}\n{out.stderr}"
    return out


def test_pip_install_e_gives_the_qwen_swe_command(tmp_path):
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(purelib, "zz_dot_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # .venv's dependencies
    run([str(python), *PIP, "-e", str(REPO_ROOT)])
    command = venv / "bin" / "qwen-swe"
    assert "qwen-swe 0.1.0" in run([str(command), "--version"]).stdout
    text = run([str(command), "train", "--help"]).stdout
    assert "--print-config" in text and "(env N_SAMPLES; default: 2;" in " ".join(text.split())


def test_the_wheel_carries_the_data_files(tmp_path):
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(REPO_ROOT),
        ]
    )
    (wheel,) = tmp_path.glob("qwen_swe-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for asset in (
        "qwen_swe/data/taskpack/tasks.jsonl",
        "qwen_swe/viewer/page.html",
        "qwen_swe/data/taskpack/repos/semver/semver/__init__.py",
        "qwen_swe/data/taskpack/repos/semver/.gitignore",
        "qwen_swe/plan/models/qwen3-coder-30b-a3b-instruct.json",
        "qwen_swe/cli/main.py",
    ):
        assert asset in names, asset
    assert not any("__pycache__" in n for n in names)
    assert any(n.endswith("licenses/LICENSE") for n in names)
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "qwen-swe = qwen_swe.cli.main:main" in zipfile.ZipFile(wheel).read(entry).decode()
