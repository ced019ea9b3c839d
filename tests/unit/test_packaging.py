"""pyproject.toml and requirements.txt agree: every exact pin set-up installs is inside the range the package
declares (in its dependencies or an extra), and every declared dependency is pinned; the console command and the
package data point at things that exist."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from qwen_swe.cli import main as cli_main
from qwen_swe.paths import PACKAGE_DIR, REPO_ROOT

PROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def pins(name: str) -> dict[str, str]:
    lines = (REPO_ROOT / name).read_text().splitlines()
    pairs = (line.split("#")[0].strip().split("==") for line in lines if "==" in line.split("#")[0])
    return {canonicalize_name(package): version for package, version in pairs}


def declared() -> dict[str, Requirement]:
    extras = [r for group in PROJECT["project"]["optional-dependencies"].values() for r in group]
    return {canonicalize_name(r.name): r for r in map(Requirement, PROJECT["project"]["dependencies"] + extras)}


def test_every_pin_is_declared_and_inside_its_range():
    wanted, pinned = declared(), pins("requirements.txt")
    missing = sorted(set(pinned) - set(wanted))
    assert not missing, f"pinned in requirements.txt but not declared in pyproject.toml: {missing}"
    outside = [
        f"{name}=={v} not in {wanted[name].specifier}"
        for name, v in pinned.items()
        if not wanted[name].specifier.contains(v)
    ]
    assert not outside, outside


def test_every_declared_dependency_is_pinned():
    pinned = {**pins("requirements.txt"), "vllm": pins("requirements-vllm-cuda.txt")["vllm"]}
    unpinned = sorted(set(declared()) - set(pinned))
    assert not unpinned, f"declared in pyproject.toml but without an exact pin in requirements*.txt: {unpinned}"
    assert declared()["vllm"].specifier.contains(pinned["vllm"])


def test_the_console_command_and_the_license():
    target = PROJECT["project"]["scripts"]["qwen-swe"]
    assert target == "qwen_swe.cli.main:main" and callable(cli_main.main)
    assert (REPO_ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
    assert PROJECT["project"]["license"] == "Apache-2.0"


def test_the_package_data_globs_find_the_assets():
    data = PROJECT["tool"]["setuptools"]["package-data"]
    for package, patterns in data.items():
        folder = PACKAGE_DIR.parent / Path(*package.split("."))
        for pattern in patterns:
            assert list(folder.glob(pattern)), f"{package}: {pattern} matches nothing"
    shipped = {
        p
        for package, patterns in data.items()
        for pattern in patterns
        for p in (PACKAGE_DIR.parent / Path(*package.split("."))).glob(pattern)
    }
    for asset in (
        "data/taskpack/tasks.jsonl",
        "viewer/page.html",
        "plan/models/qwen3-coder-30b-a3b-instruct.json",
        "inference/chat_templates/hermes_compact.jinja",
        "data/taskpack/repos/semver/.gitignore",
        "reward/audit_site/sitecustomize.py",
        "reward/audit_site/pytest_objects.py",
        "reward/audit_site/wildcards.py",
    ):
        assert PACKAGE_DIR / asset in shipped, asset
