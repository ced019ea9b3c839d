"""How long set-up takes to install its Python environments: uv (``scripts/setup/pip_install.sh``) against pip.

Run: .venv/bin/python -m benchmarks.bench_install [--envs main,vllm]

In a temporary folder, each environment is created three times from its exact pins, as set-up creates it:

* ``main``: ``.venv``'s (``requirements.txt``, then ``requirements-nodeps.txt`` with ``--no-deps``);
* ``vllm``: ``.venv-vllm``'s (``requirements-vllm.txt`` with ``--no-deps``).

The three: pip, as set-up installed them before (the reference); uv with an empty cache (a fresh machine); uv
again with the cache the first uv install filled (a clean checkout on a machine that has set up before, as CI's).
Each prints its seconds and its ratio to pip's, and whether it installed exactly pip's set of distributions.
Both installers read the machine's pip configuration (pip itself, uv through ``pip_install.sh``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from qwen_swe.paths import REPO_ROOT

ENVS = {
    "main": [["-r", "requirements.txt"], ["--no-deps", "-r", "requirements-nodeps.txt"]],
    "vllm": [["--no-deps", "-r", "requirements-vllm.txt"]],
}
TIMEOUT_S = 3600.0
LIST = "import importlib.metadata as m, json; print(json.dumps([f'{d.name}=={d.version}' for d in m.distributions()]))"


def _venv(folder: Path) -> Path:
    subprocess.run(["python3", "-m", "venv", str(folder)], check=True, timeout=300)  # as set-up creates them
    return folder / "bin" / "python"


def _with_pip(python: Path, steps: list[list[str]], env: dict[str, str]) -> None:
    for args in steps:
        cmd = [str(python), "-m", "pip", "install", "-qq", "--disable-pip-version-check", *args]
        subprocess.run(cmd, cwd=REPO_ROOT, env=env, check=True, timeout=TIMEOUT_S)


def _with_uv(python: Path, steps: list[list[str]], env: dict[str, str]) -> None:
    for args in steps:
        cmd = ["bash", "scripts/setup/pip_install.sh", str(python), *args]
        subprocess.run(cmd, cwd=REPO_ROOT, env=env, check=True, timeout=TIMEOUT_S)


def _distributions(python: Path) -> set[str]:
    out = subprocess.run([str(python), "-c", LIST], capture_output=True, text=True, check=True, timeout=120).stdout
    return {d for d in json.loads(out) if not d.lower().startswith(("pip==", "setuptools==", "uv=="))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", default=",".join(ENVS), help=f"comma-separated, of {', '.join(ENVS)}")
    args = ap.parse_args()
    envs = [e.strip() for e in args.envs.split(",")]
    if unknown := [e for e in envs if e not in ENVS]:
        ap.error(f"--envs: unknown {', '.join(unknown)}; choose from {', '.join(ENVS)}")
    if not (REPO_ROOT / ".venv" / "bin" / "uv").exists():
        sys.exit("bench_install: .venv/bin/uv is missing; run scripts/setup/20_python.sh")
    with tempfile.TemporaryDirectory(prefix="bench-install-") as tmp:
        env = {**os.environ, "UV_CACHE_DIR": str(Path(tmp) / "uv-cache")}
        for name in envs:
            times: dict[str, float] = {}
            sets: dict[str, set[str]] = {}
            for how, install in (("pip", _with_pip), ("uv, empty cache", _with_uv), ("uv, warm cache", _with_uv)):
                folder = Path(tmp) / f"{name}-{how.replace(' ', '').replace(',', '-')}"
                python = _venv(folder)
                t0 = time.perf_counter()
                install(python, ENVS[name], env)
                times[how] = time.perf_counter() - t0
                sets[how] = _distributions(python)
                shutil.rmtree(folder)
                same = (
                    "the same distributions as pip"
                    if sets[how] == sets["pip"]
                    else "DIFFERENT from pip: " + str(sorted(sets[how] ^ sets["pip"]))
                )
                print(
                    f"{name}: {how}: {times[how]:.1f} s, {len(sets[how])} distributions, {same}, "
                    f"{times[how] / times['pip']:.2f}x pip",
                    flush=True,
                )


if __name__ == "__main__":
    main()
