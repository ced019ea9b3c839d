"""The Docker storage driver the set-up gives a new engine: vfs in CI (its contract), overlay2 where the kernel
has overlay, vfs where it has not, and DOCKER_STORAGE_DRIVER over both."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from qwen_swe.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "setup" / "10_system.sh"
WITH_OVERLAY = "nodev\tsysfs\nnodev\toverlay\n\text4\n"
WITHOUT_OVERLAY = "nodev\tsysfs\n\text4\n"


def _driver(tmp_path: Path, filesystems: str, **env: str) -> subprocess.CompletedProcess:
    fs = tmp_path / "filesystems"
    fs.write_text(filesystems)
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "DOCKER_STORAGE_DRIVER")}
    return subprocess.run(
        ["bash", "-c", f'source "{SCRIPT}"; storage_driver "{fs}"'],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    "filesystems, env, expected",
    [
        (WITH_OVERLAY, {}, "overlay2"),
        (WITHOUT_OVERLAY, {}, "vfs"),
        (WITH_OVERLAY, {"CI": "true"}, "overlay2"),  # CI starts Docker as the set-up does on a user's machine
        (WITH_OVERLAY, {"DOCKER_STORAGE_DRIVER": "vfs"}, "vfs"),
        (WITHOUT_OVERLAY, {"DOCKER_STORAGE_DRIVER": "overlay2", "CI": "true"}, "overlay2"),
    ],
)
def test_storage_driver_choice(tmp_path, filesystems, env, expected):
    proc = _driver(tmp_path, filesystems, **env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == expected


def test_unknown_storage_driver_is_refused_by_name(tmp_path):
    proc = _driver(tmp_path, WITH_OVERLAY, DOCKER_STORAGE_DRIVER="btrfs")
    assert proc.returncode != 0
    assert "DOCKER_STORAGE_DRIVER=btrfs" in proc.stderr and "vfs or overlay2" in proc.stderr
