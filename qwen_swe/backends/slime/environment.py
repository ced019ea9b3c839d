"""What must hold outside slime's checkout before its train.py can start: the packages of the interpreter that will
run it (checked in that interpreter), a CUDA GPU, and a vLLM server that accepts new weights.

Only the standard library is imported at module level: ``--check-env`` runs this inside slime's interpreter, which
need not have this project's other dependencies.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from qwen_swe.config.settings import Settings
from qwen_swe.paths import REPO_ROOT, python_path

IMAGE_HINT = {
    "fsdp": "or run inside slime v0.2.2's image (docker/Dockerfile: slimerl/sglang:nightly-dev-20260107-dce8b060 "
    "with flash-attn 2.7.4.post1)",
    "megatron": "or run inside slime v0.3.1's image (docker/Dockerfile: slimerl/sglang:v0.5.15.post1-cu129 with "
    "Megatron-LM at commit 1dcf0da and transformer_engine 2.16.1)",
}
# (distribution, import name, why slime or the rollout needs it, how to install it)
COMMON: tuple[tuple[str, str, str, str], ...] = (
    ("torch", "torch", "the training actor (a CUDA build)", "pip install 'torch'"),
    (
        "transformers",
        "transformers",
        "the model, and slime's mask code (breaks on transformers >= 5)",
        "pip install 'transformers<5'",
    ),
    ("ray", "ray", "slime's actors and placement groups", "pip install 'ray[default]'"),
    ("sglang", "sglang", "imported by slime's argument parser even with --debug-train-only", "pip install 'sglang'"),
    (
        "sglang-router",
        "sglang_router",
        "the router slime's RolloutManager starts",
        "pip install 'sglang-router>=0.2.3'",
    ),
    ("wandb", "wandb", "slime's logging module", "pip install 'wandb'"),
    ("tensorboard", "tensorboard", "slime's TensorBoard writer (REPORT_TO=tensorboard)", "pip install 'tensorboard'"),
    ("httpx", "httpx", "slime's HTTP utilities", "pip install 'httpx[http2]'"),
    ("PyYAML", "yaml", "slime's argument parser", "pip install 'pyyaml'"),
    ("safetensors", "safetensors", "the HF export of each checkpoint", "pip install 'safetensors'"),
    ("docker", "docker", "the rollout sandboxes", "pip install 'docker'"),
    ("aiohttp", "aiohttp", "the recording proxy", "pip install 'aiohttp'"),
    ("swebench", "swebench", "grading", "pip install 'swebench'"),
)
PACKAGES: dict[str, tuple[tuple[str, str, str, str], ...]] = {
    "fsdp": COMMON
    + (
        (
            "flash-attn",
            "flash_attn",
            "FSDP packs sequences; sdpa/eager attention would mix them",
            "pip install 'flash-attn'",
        ),
        ("accelerate", "accelerate", "slime's model init", "pip install 'accelerate'"),
    ),
    "megatron": COMMON
    + (
        (
            "Megatron-LM",
            "megatron.training",
            "slime's Megatron actor and its checkpoint tools",
            "put Megatron-LM on PYTHONPATH (git clone NVIDIA/Megatron-LM at the commit slime's docker/Dockerfile pins)",
        ),
        (
            "megatron-core",
            "megatron.core",
            "the model, its parallel state and dist checkpoints",
            "pip install 'megatron-core'",
        ),
        (
            "torch_memory_saver",
            "torch_memory_saver",
            "imported by slime's Megatron actor",
            "pip install 'torch_memory_saver'",
        ),
    ),
}
RELOAD_ROUTES = ("/pause", "/resume", "/collective_rpc", "/reset_prefix_cache")


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:  # a dotted name whose parent package is absent
        return True


def check_packages(backend: str = "fsdp") -> dict[str, Any]:
    """Problems with the packages of *this* interpreter for ``backend``, and its CUDA device count (run it in
    slime's interpreter)."""
    problems = []
    for dist, module, why, fix in PACKAGES[backend]:
        if _missing(module):
            problems.append(f"{dist} is missing ({why}): {fix}")
            continue
        if dist == "transformers":
            version = importlib.metadata.version("transformers")
            if int(version.split(".")[0]) >= 5:
                problems.append(
                    f"transformers {version} is installed; slime's mask code needs transformers "
                    "below 5 (apply_chat_template returns a BatchEncoding in 5.x): "
                    "pip install 'transformers<5'"
                )
    devices = 0
    if not _missing("torch"):
        import torch

        devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not devices:
        problems.append(
            f"no CUDA GPU is visible: slime's {backend} backend needs CUDA and NCCL "
            "(use BACKEND=fsdp, the built-in trainer, on CPU)"
        )
    return {"python": sys.executable, "problems": problems, "cuda_devices": devices}


def check_packages_in(python: str, backend: str = "fsdp") -> dict[str, Any]:
    """``check_packages`` run by ``python`` (the interpreter that will run train.py)."""
    if os.path.abspath(python) == os.path.abspath(sys.executable):  # not resolve(): venvs symlink one base
        return check_packages(backend)
    env = {**os.environ, "PYTHONPATH": python_path(inherited=os.environ.get("PYTHONPATH"))}
    try:
        done = subprocess.run(
            [python, "-m", "qwen_swe.backends.slime.launcher", "--check-env", backend],
            env=env,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return {
            "python": python,
            "cuda_devices": 0,
            "problems": [f"cannot run the environment check with SLIME_PYTHON={python} ({exc})"],
        }


def check_server(settings: Settings, timeout: float = 10.0) -> tuple[list[str], list[str]]:
    """(problems, warnings) about keeping the server on-policy. A problem means the run would train against
    a frozen server: no server, unreachable, or no reload endpoints (vLLM without VLLM_SERVER_DEV_MODE=1)."""
    if not settings.inference.vllm_url:
        return [
            "BACKEND=slime needs VLLM_URL: a vLLM server (>= 0.16, started with VLLM_SERVER_DEV_MODE=1) that "
            "the rollout function reloads after every step; the embedded CPU server serves the built-in "
            "trainer only"
        ], []
    root = settings.inference.vllm_url.rstrip("/").removesuffix("/v1")
    try:
        with urllib.request.urlopen(root + "/openapi.json", timeout=timeout) as resp:
            routes = set(json.loads(resp.read()).get("paths", {}))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return [
            f"cannot list the routes of {root} (GET /openapi.json: {getattr(exc, 'reason', exc)}); start the "
            "server first, so the launcher can confirm it accepts new weights"
        ], []
    missing = [r for r in RELOAD_ROUTES if r not in routes]
    if missing:
        return [
            f"{root} has no {', '.join(missing)}: it cannot reload weights, so every rollout would use the "
            "starting weights. Restart vLLM (>= 0.16) with VLLM_SERVER_DEV_MODE=1"
        ], []
    host = urllib.parse.urlparse(root).hostname or ""
    warnings = []
    if host not in ("localhost", "127.0.0.1", "::1", os.uname().nodename):
        warnings.append(
            f"{host} is not this machine: the server must read {settings.output_dir}/hf_export at "
            "the same path (a shared file system), or its reloads fail"
        )
    return [], warnings
