"""What this machine computes natively, read from the kernel (no torch import on the settings path)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

# CPU flags of native bf16 matmuls: x86's AVX512-BF16 and AMX, Arm's BF16 extension ("Features" in /proc/cpuinfo)
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})

# How --help and the reference show the embedded profile's values that depend on the machine
PROFILE_SHOWN = {
    "mixed_precision": "True where bf16 is native, else False",
    "broadcast_dtype": "bfloat16 where native, else float32",
    "rollout_concurrency": "16 where bf16 is native, else 4",
    "boot_concurrency": "4 where bf16 is native, else 2",
}


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:
        return frozenset()
    return frozenset(
        flag
        for line in lines
        if line.split(":")[0].strip() in ("flags", "Features")
        for flag in line.split(":")[1].split()
    )


@cache
def native_bf16(cpuinfo: Path = Path("/proc/cpuinfo"), gpus: Path = Path("/proc/driver/nvidia/gpus")) -> bool:
    """Whether bf16 compute pays off here: an NVIDIA GPU, or a CPU with bf16 instructions. Elsewhere PyTorch emulates
    bf16 matmuls, and they run about 25x slower than fp32 (an AVX2-only AMD EPYC: 0.8 against 20 GFLOPS)."""
    return (gpus.is_dir() and any(gpus.iterdir())) or bool(BF16_FLAGS & cpu_flags(cpuinfo))


def served_dtype() -> str:
    """The dtype a CPU vLLM server computes in here: bf16 where native (half the KV cache's bytes), else fp32 (vLLM's
    warm-up of the embedded model took 460 s in emulated bf16 on an AVX2-only CPU)."""
    return "bfloat16" if native_bf16() else "float32"
