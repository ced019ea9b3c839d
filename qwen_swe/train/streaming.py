"""The policy's weights bucket by bucket, for ``WEIGHT_SYNC=broadcast``: no full copy on any rank.

Collective: every rank walks the parameters in the same order and all-gathers one at a time (``full_tensor``);
rank 0 casts each to the serving dtype, renames it to the checkpoint's names (transformers 5's fused MoE experts
are split back into the per-expert tensors checkpoints and vLLM use) and yields a bucket once it holds
``bucket_bytes``; the other ranks only take part in the gathers (their generator yields nothing). Peak extra memory on rank 0 is one bucket
plus one gathered parameter.
"""

from __future__ import annotations

import re
from typing import Iterator

import torch
import torch.distributed as dist
from torch import Tensor, nn

from qwen_swe.train.loading import checkpoint_name

Bucket = list[tuple[str, Tensor]]
_FUSED = re.compile(r"^(?P<prefix>.*\.mlp\.experts)\.(?P<kind>gate_up_proj|down_proj)$")


def hf_tensors(name: str, full: Tensor) -> list[tuple[str, Tensor]]:
    """One policy tensor under the names an HF checkpoint (and vLLM's ``load_weights``) uses."""
    m = _FUSED.match(name)
    if m is None:
        return [(name, full)]
    if m["kind"] == "down_proj":
        return [(f"{m['prefix']}.{e}.down_proj.weight", full[e]) for e in range(full.shape[0])]
    gate, up = full.chunk(2, dim=1)
    return [item for e in range(full.shape[0]) for item in
            ((f"{m['prefix']}.{e}.gate_proj.weight", gate[e]), (f"{m['prefix']}.{e}.up_proj.weight", up[e]))]


def weight_buckets(policy: nn.Module, bucket_bytes: int, dtype: torch.dtype) -> Iterator[Bucket]:
    """Collective generator: buckets of ``(checkpoint name, tensor)`` on rank 0; drain it on every rank.

    With LoRA only the adapted layers change (everything else is frozen, and the server already has it), so only
    those go out, merged as the disk export merges them (``W + alpha/r * B @ A``).
    """
    params = dict(policy.named_parameters())
    scaling = _lora_scaling(policy) if any(".lora_A." in n for n in params) else None
    rank0 = dist.get_rank() == 0
    bucket: Bucket = []
    size = 0
    for pname, param in params.items():
        if scaling is None:
            full = _gather(param)
        else:
            prefix = pname.split(".base_layer.")[0]
            a, b = params.get(f"{prefix}.lora_A.default.weight"), params.get(f"{prefix}.lora_B.default.weight")
            if ".base_layer." not in pname or not pname.endswith(".weight") or a is None or b is None:
                continue  # frozen and unchanged
            full, fa, fb = _gather(param), _gather(a), _gather(b)
            full = full + scaling * (fb.float() @ fa.float()).to(full.dtype)
        if not rank0:
            continue
        for name, tensor in hf_tensors(checkpoint_name(pname), full.detach()):
            tensor = tensor.to(dtype).contiguous()
            bucket.append((name, tensor))
            size += tensor.numel() * tensor.element_size()
        if size >= bucket_bytes:
            yield bucket
            bucket, size = [], 0
    if rank0 and bucket:
        yield bucket


def _gather(param: Tensor) -> Tensor:
    return param.full_tensor() if hasattr(param, "full_tensor") else param


def _lora_scaling(policy: nn.Module) -> float:
    lm = getattr(policy, "lm", policy)
    cfg = lm.peft_config["default"]
    return cfg.lora_alpha / cfg.r
