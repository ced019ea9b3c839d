"""``python -m qwen_swe.plan``: per-GPU memory of a training configuration, and whether it fits the GPU.

The model comes from ``--config`` (a config.json, a model folder, or a built-in name: no hub); the training
shape from the run's own settings (env vars or flags: TRAIN_PROCS, MICRO_BATCH_SIZE, MAX_RESPONSE_LEN,
LORA_RANK, LORA_ALPHA, ACTIVATION_CHECKPOINTING, MIXED_PRECISION, KL_LOSS_COEF; COLOCATE and TP add the colocated
turns), so the plan describes the run those settings would start. ``--search`` also lists, for the same model and
GPU, which combinations fit.

    python -m qwen_swe.plan --config qwen3-coder-30b-a3b --gpu-memory-gb 80 --train-procs 8 \\
        --activation-checkpointing true --mixed-precision true
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence

from qwen_swe.config.settings import load_settings
from qwen_swe.errors import ConfigError
from qwen_swe.plan.check import train_shape
from qwen_swe.plan.memory import BUILT_IN, GIB, ModelShape, TrainShape, colocated, model_shape, plan

SEARCH_STEP, SEARCH_MAX = 1024, 262144  # sample lengths tried: multiples of 1 Ki tokens up to 256 Ki


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    p.add_argument("--config", required=True, help=f"config.json, model folder, or one of {', '.join(BUILT_IN)}")
    p.add_argument("--gpu-memory-gb", type=float, default=80.0, help="memory of one GPU, GiB (A100-80GB: 80)")
    p.add_argument("--prompt-len", type=int, default=2048, help="prompt tokens before the response (default 2048)")
    p.add_argument("--cpu", action="store_true", help="plan for CPU ranks: no CUDA reserve")
    p.add_argument("--search", action="store_true", help="also list the settings that fit this GPU")
    return p


def _show(m: ModelShape, t: TrainShape, gpu_bytes: float) -> bool:
    p = plan(m, t)
    print(
        f"model {m.name}: {m.params / 1e9:.3f} B parameters ({m.trainable / 1e9:.3f} B trainable), "
        f"{m.layers} layers" + (f", {m.experts} experts (top {m.top_k})" if m.experts else "")
    )
    print(
        f"training: {t.world} ranks, micro-batch {t.micro_batch} x {t.seq_len} tokens "
        f"({t.response_len} response), LoRA rank {t.lora_rank}, activation checkpointing "
        f"{'on' if t.activation_checkpointing else 'off'}, {'bf16 compute' if t.mixed_precision else 'fp32'}"
    )
    for name, value in p.rows():
        print(f"  {name:68s} {value / GIB:8.2f} GiB")
    fits = p.total <= gpu_bytes
    print(
        f"  {'total per GPU':68s} {p.total / GIB:8.2f} GiB of {gpu_bytes / GIB:.0f} GiB: "
        f"{'fits' if fits else 'does NOT fit'}"
    )
    return fits


def _show_colocated(m: ModelShape, t: TrainShape, gpu_bytes: float, tp: int, bucket_bytes: int) -> bool:
    """COLOCATE=true: the same GPUs hold a sleeping vLLM server beside the step, and its weights during the push."""
    c = colocated(m, t, plan(m, t), tp=tp, bucket_bytes=bucket_bytes)
    for name, value in c.rows():
        print(f"  {name:68s} {value / GIB:8.2f} GiB")
    fits = c.total <= gpu_bytes
    print(
        f"  {'COLOCATE: peak per GPU':68s} {c.total / GIB:8.2f} GiB of {gpu_bytes / GIB:.0f} GiB: "
        f"{'fits' if fits else 'does NOT fit'}"
    )
    print(f"  {'COLOCATE: host memory of the node (parked trainer, sleeping server)':68s} {c.host / GIB:8.2f} GiB")
    return fits


def _search(config: str, t: TrainShape, gpu_bytes: float, prompt: int, lora_alpha: int) -> None:
    print(f"\nsettings that fit ({t.world} ranks, micro-batch 1, {prompt}-token prompt):")
    print(f"  {'LORA_RANK':>9} {'ACTIVATION_CHECKPOINTING':>24} {'MIXED_PRECISION':>15}  longest sample that fits")
    shapes = {r: model_shape(config, lora_rank=r, lora_alpha=lora_alpha) for r in (0, 16)}
    for rank, ckpt, mixed in itertools.product((0, 16), (False, True), (False, True)):
        fitting = [
            n
            for n in range(SEARCH_STEP + prompt, SEARCH_MAX + 1, SEARCH_STEP)
            if plan(shapes[rank], TrainShape(t.world, 1, n, n - prompt, rank, ckpt, mixed, t.gpu, t.reference)).total
            <= gpu_bytes
        ]
        best = f"{max(fitting)} tokens ({max(fitting) - prompt} response)" if fitting else "none"
        print(f"  {rank:>9} {str(ckpt).lower():>24} {str(mixed).lower():>15}  {best}")


def main(argv: Sequence[str] | None = None) -> int:
    own, rest = parser().parse_known_args(list(sys.argv[1:] if argv is None else argv))
    try:
        settings = load_settings(rest, profile=False)
        tr = settings.train
        world = tr.train_procs or 8
        t = train_shape(settings, world, prompt_len=own.prompt_len, gpu=not own.cpu)
        m = model_shape(own.config, lora_rank=tr.lora_rank, lora_alpha=tr.lora_alpha)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    gpu_bytes = own.gpu_memory_gb * GIB
    fits = _show(m, t, gpu_bytes)
    if settings.placement.colocate:
        inf = settings.inference
        fits = _show_colocated(m, t, gpu_bytes, inf.tp, inf.broadcast_bucket_mb << 20)
    if own.search:
        _search(own.config, t, gpu_bytes, own.prompt_len, tr.lora_alpha)
    return 0 if fits else 1


if __name__ == "__main__":
    sys.exit(main())
