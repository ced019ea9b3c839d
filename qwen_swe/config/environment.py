"""Environment variables that look like settings but are not one fail at start: a misspelt ``ROLLOUT_BATCHSIZE=8``
would otherwise be ignored without a word, and the run would use the default.

Conservative on purpose, so that an ordinary environment never fails: only UPPER_SNAKE names, never the families
other programs read (the shell, Python, CUDA, torch, vLLM, Hugging Face, Ray, CI systems), and only names very close
to a setting; the project's own prefix is reserved for the variables it reads.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping

from qwen_swe.errors import ConfigError
from qwen_swe.supervise import FAULT_DIR_ENV

PREFIX = "QWEN_SWE_"
# Read by the project itself: its cache folder, the agent's process marker, the signal tests' process marker, where
# a trainer rank writes its stacks when it crashes.
PROJECT_VARS = frozenset({"QWEN_SWE_HOME", "QWEN_SWE_AGENT_RUN", "QWEN_SWE_TEST_MARKER", FAULT_DIR_ENV})
FOREIGN_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "CI",
        "USER",
        "SHELL",
        "TERM",
        "PWD",
        "OLDPWD",
        "LANG",
        "TMPDIR",
        "TMP",
        "TEMP",
        "HOSTNAME",
        "RANK",
        "DEBIAN_MIRROR",
        "SLIME_PATH",
        "EMBEDDED_VLLM_URL",
    }
)
FOREIGN_PREFIXES = (
    "VLLM_",
    "HF_",
    "HUGGINGFACE_",
    "TRANSFORMERS_",
    "TOKENIZERS_",
    "TORCH",
    "NCCL_",
    "GLOO_",
    "CUDA_",
    "NVIDIA_",
    "PYTHON",
    "PYTEST",
    "OMP_",
    "MKL_",
    "KMP_",
    "OPENBLAS_",
    "TRITON_",
    "RAY_",
    "MODAL_",
    "DOCKER_",
    "LC_",
    "XDG_",
    "SSH_",
    "GITHUB_",
    "RUNNER_",
    "SLURM_",
    "WANDB_",
    "AWS_",
    "PIP_",
    "UV_",
    "CONDA_",
    "NODE_",
    "NPM_",
    "LOCAL_",
    "MASTER_",
    "WORLD_",
    "GROUP_",
    "ROLE_",
)
UPPER_SNAKE = re.compile(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)*")
CUTOFF = 0.85  # ROLLOUT_BATCHSIZE -> ROLLOUT_BATCH_SIZE is 0.97; SERVER_URL -> SERVED_URL 0.9 (not a user setting)


def check_environment(env: Mapping[str, str], settings: Collection[str], internal: Collection[str] = ()) -> None:
    """Raise one ConfigError naming every variable of ``env`` that looks like one of ``settings`` (env names) but is
    not one, each with the nearest setting; ``internal`` settings (filled in by the run) are never suggested."""
    found = [_problem(name, settings) for name in sorted(env) if name not in settings and name not in internal]
    problems = [p for p in found if p]
    if problems:
        raise ConfigError("; ".join(problems) + " (`--help` lists every setting)")


def _problem(name: str, settings: Collection[str]) -> str | None:
    if name.startswith(PREFIX):
        if name in PROJECT_VARS:
            return None
        near = nearest(name[len(PREFIX) :], settings)
        return f"{name} is not a setting (settings have no prefix); " + (
            f"did you mean {near}?" if near else "unset it"
        )
    if name in FOREIGN_NAMES or name.startswith(FOREIGN_PREFIXES) or not UPPER_SNAKE.fullmatch(name):
        return None
    near = nearest(name, settings)
    return f"{name} is not a setting; did you mean {near}?" if near else None


def nearest(name: str, settings: Collection[str], cutoff: float = CUTOFF) -> str | None:
    """The setting ``name`` most likely means, if one is at least ``cutoff`` similar (difflib's ratio)."""
    near = difflib.get_close_matches(name, list(settings), n=1, cutoff=cutoff)
    return near[0] if near else None
