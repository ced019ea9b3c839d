"""bf16 compute is chosen only where the machine runs it natively: emulated on the CPU, it is about 25x slower."""

from __future__ import annotations

import torch

from qwen_swe.config.hardware import cpu_flags, native_bf16, served_dtype
from qwen_swe.config.profile import EMBEDDED_PROFILE
from qwen_swe.warmstart.stage import WarmStartSpec

AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu sse2 avx avx2 fma\n"
SAPPHIRE = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
GRAVITON3 = "processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd sve bf16 i8mm\n"


def test_the_cpu_flags_say_where_bf16_is_native(tmp_path):
    nogpu = tmp_path / "no-nvidia"
    for text, native in ((AVX2, False), (SAPPHIRE, True), (GRAVITON3, True)):
        info = tmp_path / "cpuinfo"
        info.write_text(text)
        assert native_bf16.__wrapped__(info, nogpu) is native, text
    assert "avx2" in cpu_flags(tmp_path / "cpuinfo") or cpu_flags(tmp_path / "cpuinfo") >= {"bf16", "sve"}
    assert cpu_flags(tmp_path / "missing") == frozenset()  # no /proc: fp32, the safe choice


def test_an_nvidia_gpu_counts_as_native(tmp_path):
    info, gpus = tmp_path / "cpuinfo", tmp_path / "gpus"
    info.write_text(AVX2)
    (gpus / "0000:00:1e.0").mkdir(parents=True)
    assert native_bf16.__wrapped__(info, gpus)


def test_this_machines_answer_agrees_with_torch_and_sets_the_defaults():
    # torch's own probes of the CPU's bf16 instructions (x86 here): the kernel's flags must say the same
    assert native_bf16() == (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    assert EMBEDDED_PROFILE["mixed_precision"] is native_bf16()
    assert EMBEDDED_PROFILE["broadcast_dtype"] == served_dtype() == ("bfloat16" if native_bf16() else "float32")
    assert WarmStartSpec().mixed_precision is native_bf16()
