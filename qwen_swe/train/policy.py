"""The policy under FSDP2: loading, sharding, response log-probs in chunks, and the HF weight export.

Why it looks like this:
- ``PolicyModel`` wraps the causal LM and is the *root* FSDP module, so the root's forward hook gathers the
  embedding, final norm and (tied) ``lm_head`` before our own code runs the head on slices of the hidden
  states. Calling ``lm.model`` and ``lm.lm_head`` from outside a root forward would see sharded DTensors.
- Only response positions go through ``lm_head``, in chunks, each under activation checkpointing: the
  ``[tokens, vocab]`` fp32 logits (152k vocab for Qwen) exist for one chunk at a time, in forward and in
  backward. ``chunk_size=0`` is the full-logits reference the benchmark compares against.
- Log-probs are those of the distribution the rollouts were sampled from: logits divided by the sampling
  ``temperature`` (slime's ``--rollout-temperature``), so the policy gradient and the importance ratio are the
  sampled policy's. The entropy metric stays the model's own (unscaled logits), as in slime.
- The export gathers the full state dict to rank 0 (``cpu_offload``) and writes a plain HF folder that
  vLLM's ``reload_weights`` and ``from_pretrained`` read. With LoRA it writes *merged* weights
  (W + alpha/r * B A), so the inference server reloads the same way with and without LoRA.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from qwen_swe.config.hardware import native_bf16
from qwen_swe.errors import TrainerError
from qwen_swe.paths import ORIGIN_FILE, base_model_of
from qwen_swe.train import loading
from qwen_swe.train.settings import WEIGHT_LOADINGS

log = logging.getLogger("qwen_swe.policy")

DEFAULT_CHUNK = 256


class PolicyModel(nn.Module):
    """Root module: the causal LM and the chunked log-prob computation inside one forward."""

    def __init__(self, lm: nn.Module, chunk_size: int = DEFAULT_CHUNK, temperature: float = 1.0) -> None:
        super().__init__()
        if not temperature > 0:
            raise TrainerError(f"the log-probs' temperature must be > 0, got {temperature}")
        self.lm: Any = lm  # a transformers model or peft's wrapper: its methods are not in nn.Module's types
        self.chunk_size = chunk_size
        self.temperature = temperature

    def base(self) -> nn.Module:
        return self.lm.get_base_model() if hasattr(self.lm, "get_base_model") else self.lm

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None, positions: Tensor, targets: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Log-probs ``[N]`` of ``targets`` predicted at flat ``positions`` of ``input_ids`` (``[B, T]``) at the
        sampling temperature, and the entropy ``[N]`` of the model's predictive distributions (detached)."""
        base: Any = self.base()  # a transformers model: get_decoder() is not in nn.Module's types
        out = base.get_decoder()(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        hidden = out.last_hidden_state.reshape(-1, out.last_hidden_state.shape[-1])
        head = base.get_output_embeddings()
        if self.chunk_size <= 0:  # reference path: full [B*T, V] fp32 logits
            return _pick(head(hidden).float()[positions], targets, self.temperature)
        picked = hidden.index_select(0, positions)
        lps, ents = [], []
        for start in range(0, picked.shape[0], self.chunk_size):
            h, t = picked[start : start + self.chunk_size], targets[start : start + self.chunk_size]
            if torch.is_grad_enabled():
                lp, ent = checkpoint(_chunk_logprobs, head, h, t, self.temperature, use_reentrant=False)
            else:
                lp, ent = _chunk_logprobs(head, h, t, self.temperature)
            lps.append(lp)
            ents.append(ent)
        return torch.cat(lps), torch.cat(ents)


def _chunk_logprobs(head: nn.Module, hidden: Tensor, targets: Tensor, temperature: float) -> tuple[Tensor, Tensor]:
    return _pick(head(hidden).float(), targets, temperature)


def _pick(logits: Tensor, targets: Tensor, temperature: float) -> tuple[Tensor, Tensor]:
    model_logp = torch.log_softmax(logits, dim=-1)
    with torch.no_grad():
        entropy = -(model_logp.exp() * model_logp).sum(-1)
    logp = model_logp if temperature == 1.0 else torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1), entropy


@dataclass
class MicroBatch:
    """Padded inputs for ``PolicyModel.forward`` and the ``[B, R]`` response layout for the loss."""

    input_ids: Tensor
    attention_mask: Tensor | None
    positions: Tensor
    targets: Tensor
    valid: Tensor  # [B, R] bool: j < response_length of sample b (packed order = row-major True order)

    def unpack(self, packed: Tensor) -> Tensor:
        """Packed ``[N]`` values -> ``[B, R]`` with zeros where ``valid`` is False (differentiable)."""
        return torch.zeros(self.valid.shape, dtype=packed.dtype, device=packed.device).masked_scatter(
            self.valid, packed
        )

    def pad(self, rows: Sequence[Sequence[float]], dtype: torch.dtype = torch.float32) -> Tensor:
        out = torch.zeros(self.valid.shape, dtype=dtype, device=self.valid.device)
        for b, row in enumerate(rows):
            out[b, : len(row)] = torch.tensor(row, dtype=dtype)
        return out


def make_micro_batch(samples: Sequence[dict[str, Any]], device: torch.device, pad_id: int = 0) -> MicroBatch:
    """Right-padded batch of ``{"tokens", "response_length"}`` dicts; the response is the tail of tokens."""
    lengths = [len(s["tokens"]) for s in samples]
    resp = [int(s["response_length"]) for s in samples]
    width, rmax = max(lengths), max(resp)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(samples), width), dtype=torch.long)
    positions, targets = [], []
    for b, s in enumerate(samples):
        n, r = lengths[b], resp[b]
        ids[b, :n] = torch.tensor(s["tokens"], dtype=torch.long)
        mask[b, :n] = 1
        positions.append(torch.arange(n - r - 1, n - 1) + b * width)
        targets.append(ids[b, n - r : n])
    valid = torch.arange(rmax).unsqueeze(0) < torch.tensor(resp).unsqueeze(1)
    needs_mask = len(set(lengths)) > 1
    return MicroBatch(
        ids.to(device),
        mask.to(device) if needs_mask else None,
        torch.cat(positions).to(device),
        torch.cat(targets).to(device),
        valid.to(device),
    )


def build_policy(
    model_path: str,
    *,
    device: torch.device,
    lora_rank: int = 0,
    lora_alpha: int = 16,
    activation_checkpointing: bool = False,
    mixed_precision: bool = False,
    chunk_size: int = DEFAULT_CHUNK,
    weight_loading: str = "full",
    temperature: float = 1.0,
) -> PolicyModel:
    """fp32 master weights, LoRA if asked, sharded with FSDP2: each decoder layer, then the root; log-probs at
    the sampling ``temperature``.

    ``weight_loading="full"`` loads the whole model on every rank, then shards; ``"meta"`` builds it on the meta
    device, shards, and reads each rank's rows from the safetensors files (``loading.py``): the same shards.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    if weight_loading not in WEIGHT_LOADINGS:
        raise TrainerError(f"WEIGHT_LOADING={weight_loading!r} is not one of {', '.join(WEIGHT_LOADINGS)}")
    meta = weight_loading == "meta"
    if meta:
        folder = loading.resolve_folder(model_path)
        with loading.parameters_on_meta():
            lm = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(folder)), dtype=torch.float32)
    else:
        lm = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    quantizer = getattr(lm, "hf_quantizer", None)
    if quantizer is not None:  # a GGUF-dequantised model keeps a quantizer that blocks training and saving
        quantizer.remove_quantization_config(lm)
    if activation_checkpointing:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    layer_names = set(getattr(lm, "_no_split_modules", None) or [])
    adapters: dict[str, Tensor] = {}  # meta: LoRA's initial values, which no checkpoint holds
    if lora_rank > 0:
        from peft import LoraConfig, get_peft_model

        holder: dict[str, nn.Module] = {}
        with loading.recording_adapters(holder, adapters) if meta else contextlib.nullcontext():
            lm = holder["lm"] = get_peft_model(
                lm,
                LoraConfig(
                    r=lora_rank, lora_alpha=lora_alpha, lora_dropout=0.0, target_modules="all-linear", bias="none"
                ),
            )
    lm.train()
    policy = PolicyModel(lm, chunk_size=chunk_size, temperature=temperature)
    _shard(policy, device, layer_names, mixed_precision, model_path)
    if meta:
        loading.materialize(policy, device)
        loading.load_local_shards(policy, loading.SafetensorsIndex(folder), adapters)
    return policy


class Reference:
    """The frozen policy a KL penalty pulls towards: the run's start weights (MODEL), never trained or checkpointed
    (a resumed run rebuilds it from MODEL). With LoRA it is the policy itself with its adapters switched off, so no
    second copy; otherwise a second copy sharded like the policy (slime's FSDP ref model, without CPU offload)."""

    def __init__(self, policy: PolicyModel, copy: PolicyModel | None) -> None:
        self.policy, self.copy = policy, copy

    @classmethod
    def build(
        cls,
        policy: PolicyModel,
        model_path: str,
        *,
        device: torch.device,
        lora: bool,
        mixed_precision: bool,
        weight_loading: str,
    ) -> Reference:
        if lora:
            return cls(policy, None)
        copy = build_policy(
            model_path,
            device=device,
            mixed_precision=mixed_precision,
            weight_loading=weight_loading,
            temperature=policy.temperature,
        )
        copy.requires_grad_(False)
        copy.eval()
        return cls(policy, copy)

    @torch.no_grad()
    def logprobs(self, mb: MicroBatch) -> Tensor:
        """``[B, R]`` reference log-probs of the micro-batch's response tokens."""
        inputs = (mb.input_ids, mb.attention_mask, mb.positions, mb.targets)
        if self.copy is not None:
            return mb.unpack(self.copy(*inputs)[0])
        with _adapters_off(self.policy.lm):
            return mb.unpack(self.policy(*inputs)[0])


@contextlib.contextmanager
def _adapters_off(lm: nn.Module):
    """LoRA layers compute the base output only. Not peft's ``disable_adapter()``: that also turns the adapters'
    ``requires_grad`` off and on again, after which FSDP2 with bf16 compute fails to assign their gradients."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in lm.modules() if isinstance(m, BaseTunerLayer)]
    before = [m._disable_adapters for m in layers]
    try:
        for m in layers:
            m._disable_adapters = True
        yield
    finally:
        for m, flag in zip(layers, before):
            m._disable_adapters = flag


def _shard(
    policy: PolicyModel, device: torch.device, layer_names: set[str], mixed_precision: bool, model_path: str
) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    kwargs: dict[str, Any] = {"mesh": mesh}
    if mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if device.type == "cpu" and not native_bf16():
            log.warning("MIXED_PRECISION=true on a CPU without bf16 instructions: emulated, about 25x slower than fp32")
    layers = [m for m in policy.modules() if type(m).__name__ in layer_names]
    if not layers:
        raise RuntimeError(f"{model_path}: found no decoder layers ({sorted(layer_names)}) to shard")
    for layer in layers:
        fully_shard(layer, **kwargs)
    fully_shard(policy, **kwargs)


def parameter_bytes(policy: nn.Module) -> tuple[int, int]:
    """(all parameter bytes, trainable parameter bytes) of the *global* (unsharded) model."""
    seen: set[int] = set()
    total = trainable = 0
    for p in policy.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        size = p.numel() * p.element_size()
        total += size
        trainable += size if p.requires_grad else 0
    return total, trainable


def full_state_dict(policy: PolicyModel) -> dict[str, Tensor]:
    """Collective: the whole model's HF-named weights on rank 0 (CPU), ``{}`` elsewhere; LoRA merged."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    sd = get_model_state_dict(policy, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() != 0:
        return {}
    named = cast("dict[str, Tensor]", {k.removeprefix("lm."): v for k, v in sd.items()})  # full: plain tensors
    if any(".lora_A." in k for k in named):
        named = merge_lora(named, scaling=_lora_scaling(policy))
    return named


def _lora_scaling(policy: PolicyModel) -> float:
    cfg = policy.lm.peft_config["default"]
    return cfg.lora_alpha / cfg.r


def merge_lora(sd: dict[str, Tensor], scaling: float) -> dict[str, Tensor]:
    """peft names -> HF names with ``W + scaling * B @ A`` folded into every adapted weight."""
    out: dict[str, Tensor] = {}
    for key, value in sd.items():
        if ".lora_A." in key or ".lora_B." in key:
            continue
        name = key.removeprefix("base_model.model.")
        if ".base_layer." in key:
            prefix = key.split(".base_layer.")[0]
            a, b = sd.get(f"{prefix}.lora_A.default.weight"), sd.get(f"{prefix}.lora_B.default.weight")
            if key.endswith(".weight") and a is not None and b is not None:
                value = value + scaling * (b.float() @ a.float()).to(value.dtype)
            name = name.replace(".base_layer.", ".")
        out[name] = value
    return out


def save_hf_folder(sd: dict[str, Tensor], folder: Path, model_path: str, tokenizer: Any | None) -> Path:
    """Rank 0: write ``sd`` as an HF safetensors folder in the source checkpoint's dtype (atomic rename)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(model_path)
    dtype = getattr(cfg, "dtype", None) or torch.float32
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    missing, unexpected = model.load_state_dict({k: v.to(dtype) for k, v in sd.items()}, strict=False, assign=True)
    tied = {k for k in missing if k.endswith("lm_head.weight")}
    if set(missing) - tied or unexpected:
        raise RuntimeError(
            f"weights do not fit {model_path}: missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}"
        )
    model.tie_weights()
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(tmp))
    (tmp / ORIGIN_FILE).write_text(json.dumps({"base_model": base_model_of(model_path)}) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder
