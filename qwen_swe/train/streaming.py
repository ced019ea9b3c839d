"""The policy's weights bucket by bucket, for ``WEIGHT_SYNC=broadcast``: no full copy on any rank.

Collective: every rank walks the parameters in the same order and all-gathers one at a time (``full_tensor``);
rank 0 casts each to the serving dtype, renames it to the checkpoint's names (transformers 5's fused MoE experts
are split back into the per-expert tensors checkpoints and vLLM use) and yields a bucket once it holds
``bucket_bytes``; the other ranks only take part in the gathers (their generator yields nothing). Peak extra memory
on rank 0 is one bucket plus one gathered parameter. With LoRA only the adapters are gathered and sent.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from qwen_swe.inference.broadcast_worker import Entry, LoraAdapter
from qwen_swe.train.loading import checkpoint_name

Bucket = list[Entry]
_FUSED = re.compile(r"^(?P<prefix>.*\.mlp\.experts)\.(?P<kind>gate_up_proj|down_proj)$")


def hf_tensors(name: str, full: Tensor) -> list[tuple[str, Tensor]]:
    """One policy tensor under the names an HF checkpoint (and vLLM's ``load_weights``) uses."""
    m = _FUSED.match(name)
    if m is None:
        return [(name, full)]
    if m["kind"] == "down_proj":
        return [(f"{m['prefix']}.{e}.down_proj.weight", full[e]) for e in range(full.shape[0])]
    gate, up = full.chunk(2, dim=1)
    return [
        item
        for e in range(full.shape[0])
        for item in ((f"{m['prefix']}.{e}.gate_proj.weight", gate[e]), (f"{m['prefix']}.{e}.up_proj.weight", up[e]))
    ]


def weight_buckets(policy: nn.Module, bucket_bytes: int, dtype: torch.dtype) -> Iterator[Bucket]:
    """Collective generator: buckets of ``(checkpoint name, tensor)`` on rank 0; drain it on every rank.

    With LoRA only the adapters change (everything else is frozen, and the server already has it), so only they go
    out: one ``LoraAdapter`` (``lora_A``, ``lora_B``, ``alpha/r``) per adapted linear, which the server's worker
    merges into its own base weight as the disk export merges it. They travel in fp32, not ``dtype``: the merge's
    product must be the fp32 ``B @ A`` the disk export computes (bf16 factors would round the adapter before the
    product and serve different weights), and at rank r the adapter is a small fraction of the layer's bytes.
    """
    params = dict(policy.named_parameters())
    scaling = _lora_scaling(policy) if any(".lora_A." in n for n in params) else None
    rank0 = dist.get_rank() == 0
    bucket: Bucket = []
    size = 0
    for pname, param in params.items():
        if scaling is None:
            full = _gather(param).detach()
            items: list[Entry] = (
                [(name, t.to(dtype).contiguous()) for name, t in hf_tensors(checkpoint_name(pname), full)]
                if rank0
                else []
            )
        else:
            if ".lora_A." not in pname:
                continue  # frozen and unchanged, or the B of an A handled here
            prefix = pname.split(".lora_A.")[0]
            fa, fb = _gather(param), _gather(params[pname.replace(".lora_A.", ".lora_B.")])
            items = (
                [
                    LoraAdapter(
                        checkpoint_name(prefix),
                        fa.detach().float().contiguous(),
                        fb.detach().float().contiguous(),
                        scaling,
                    )
                ]
                if rank0
                else []
            )
        for item in items:
            bucket.append(item)
            size += _nbytes(item)
        if size >= bucket_bytes:
            yield bucket
            bucket, size = [], 0
    if rank0 and bucket:
        yield bucket


def _nbytes(item: Entry) -> int:
    tensors = (item.a, item.b) if isinstance(item, LoraAdapter) else (item[1],)
    return sum(t.numel() * t.element_size() for t in tensors)


def _gather(param: Tensor) -> Tensor:
    return param.full_tensor() if hasattr(param, "full_tensor") else param


def _lora_scaling(policy: nn.Module) -> float:
    lm: Any = getattr(policy, "lm", policy)  # a peft model: its peft_config is not in nn.Module's types
    cfg = lm.peft_config["default"]
    return cfg.lora_alpha / cfg.r
