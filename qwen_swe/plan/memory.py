"""Per-GPU memory of a training configuration, before it is launched.

What the built-in trainer holds on each of ``world`` ranks (FSDP2 full sharding, AdamW):
- fp32 master parameters, gradients and two AdamW moments of the trainable parameters, all sharded 1/world;
- the FSDP working set: the root module's parameters (embeddings, final norm, lm_head) gathered for the whole
  forward, two decoder layers gathered at a time (the one running and the one prefetched), and one layer's
  unsharded gradients before their reduce-scatter; in the compute dtype (bf16 with MIXED_PRECISION);
- activations: the tensors autograd saves per token and decoder layer (counted from the HF implementation:
  RMSNorms save their fp32 input and normalised output, linears their input, SDPA its q/k/v/output and
  log-sum-exp, SwiGLU its gate/up/product; an MoE layer does this per routed token, top-k times). With
  activation checkpointing only each layer's input is kept and one layer is recomputed at a time; the lm_head
  runs on response positions in chunks of 256, so its logits exist for one chunk;
- on a GPU, a fixed reserve for the CUDA context, NCCL buffers and allocator fragmentation.

With COLOCATE the trainer shares its GPUs with a vLLM server that sleeps while it steps (``colocated``): the step has
the sleeping server's residue beside it, and the weight push has the trainer's parameters (its optimizer state is
already in host memory) beside the server's woken weights.

Parameter counts come from the model itself, built on the meta device from its config.json (no weights read),
with peft's LoRA applied when asked, so they are exact for any architecture transformers knows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from qwen_swe.errors import ConfigError

GIB = 2**30
GPU_RESERVE_BYTES = 3 * GIB  # CUDA context (~0.5 GiB), NCCL buffers, caching-allocator fragmentation
SLEEPING_SERVER_BYTES = 2 * GIB  # a vLLM at sleep level 1 keeps its CUDA context and workspaces, not weights or KV
LOGPROB_CHUNK = 256  # policy.DEFAULT_CHUNK: response positions per lm_head chunk
MODELS_DIR = Path(__file__).resolve().parent / "models"
BUILT_IN = {"qwen3-coder-30b-a3b": MODELS_DIR / "qwen3-coder-30b-a3b-instruct.json"}


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a model the plan needs (counts in parameters, dims in elements)."""

    name: str
    params: int
    trainable: int
    root_params: int  # outside the decoder layers: embeddings, final norm, lm_head
    layer_params: int  # the largest decoder layer
    layers: int
    hidden: int
    q_dim: int
    kv_dim: int
    heads: int
    kv_heads: int
    qk_norm: bool
    intermediate: int
    experts: int
    top_k: int
    moe_intermediate: int
    vocab: int


@dataclass(frozen=True)
class TrainShape:
    world: int
    micro_batch: int
    seq_len: int  # prompt + response tokens of the longest sample
    response_len: int
    lora_rank: int = 0
    activation_checkpointing: bool = False
    mixed_precision: bool = False
    gpu: bool = True  # add the CUDA reserve
    reference: bool = False  # KL_LOSS_COEF > 0: a frozen copy of the start weights (none with LoRA)
    scaled_logits: bool = False  # log-probs at a temperature other than 1: a second fp32 log-softmax per chunk


def load_config(config: str) -> dict:
    """A built-in name, a config.json file, or a model folder holding one."""
    path = BUILT_IN.get(config.lower(), Path(config).expanduser())
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ConfigError(
            f"--config {config}: no such config.json or folder; give a local config.json path, a "
            f"model folder, or one of {', '.join(BUILT_IN)}"
        )
    return json.loads(path.read_text())


def model_shape(config: str, lora_rank: int = 0, lora_alpha: int = 16) -> ModelShape:
    """Count parameters on the meta device; read the dims the activation model needs from the config."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    data = load_config(config)
    cfg = AutoConfig.for_model(data.pop("model_type"), **data)
    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(cfg)
    layer_names = set(getattr(lm, "_no_split_modules", None) or [])
    layers = [m for m in lm.modules() if type(m).__name__ in layer_names]
    if lora_rank > 0:
        from peft import LoraConfig, get_peft_model

        lm = get_peft_model(lm, LoraConfig(r=lora_rank, lora_alpha=lora_alpha, target_modules="all-linear"))
    params = sum(p.numel() for p in lm.parameters())
    in_layers = [sum(p.numel() for p in layer.parameters()) for layer in layers]
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    experts = int(getattr(cfg, "num_experts", 0) or getattr(cfg, "num_local_experts", 0) or 0)
    return ModelShape(
        name=config,
        params=params,
        trainable=sum(p.numel() for p in lm.parameters() if p.requires_grad),
        root_params=params - sum(in_layers),
        layer_params=max(in_layers, default=0),
        layers=len(layers),
        hidden=cfg.hidden_size,
        q_dim=heads * head_dim,
        kv_dim=kv_heads * head_dim,
        heads=heads,
        kv_heads=kv_heads,
        qk_norm=any(n.endswith("q_norm") for n, _ in lm.named_modules()),
        intermediate=cfg.intermediate_size,
        experts=experts,
        top_k=int(getattr(cfg, "num_experts_per_tok", 0) or 0),
        moe_intermediate=int(getattr(cfg, "moe_intermediate_size", 0) or 0),
        vocab=cfg.vocab_size,
    )


def layer_activation_bytes(m: ModelShape, compute_bytes: int) -> float:
    """Bytes autograd saves per token in one decoder layer (without activation checkpointing)."""
    a, h, q, kv = compute_bytes, m.hidden, m.q_dim, m.kv_dim
    norms = 2 * (4 * h + 2 * a * h + 4)  # fp32 input, normalised and output in the compute dtype, rsqrt
    qk = (4 * q + a * q + 4 * kv + a * kv + 4 * (m.heads + m.kv_heads)) if m.qk_norm else 0
    attention = a * (q + 2 * kv) + a * q + 4 * m.heads  # SDPA inputs, its output (o_proj's input), log-sum-exp
    if m.experts:
        per_slot = 2 * a * h + 4 * a * m.moe_intermediate + a + 8  # gathered input, gate_up, act, product, out
        mlp = m.top_k * (per_slot + 16) + 4 * m.experts + 4  # router: fp32 softmax, top-k values and indices
    else:
        mlp = 4 * a * m.intermediate  # gate, silu(gate), up, gate*up
    return norms + qk + attention + mlp


@dataclass(frozen=True)
class Plan:
    parameters: float
    gradients: float
    optimizer: float
    fsdp_working_set: float
    activations: float
    reserve: float
    reference: float = 0.0

    @property
    def total(self) -> float:
        return (
            self.parameters
            + self.gradients
            + self.optimizer
            + self.fsdp_working_set
            + self.activations
            + self.reserve
            + self.reference
        )

    def rows(self) -> list[tuple[str, float]]:
        return [
            ("parameters (fp32 master, sharded)", self.parameters),
            ("gradients (fp32, sharded)", self.gradients),
            ("optimizer state (AdamW, 2 x fp32, sharded)", self.optimizer),
            ("FSDP working set (gathered root + 2 layers, 1 layer's gradients)", self.fsdp_working_set),
            ("peak activations (one micro-batch)", self.activations),
            ("CUDA context, NCCL, fragmentation", self.reserve),
        ] + ([("reference model for KL_LOSS_COEF (fp32, sharded)", self.reference)] if self.reference else [])


def plan(m: ModelShape, t: TrainShape) -> Plan:
    """Bytes per rank for model ``m`` trained as ``t``."""
    a = 2 if t.mixed_precision else 4
    tokens = t.micro_batch * t.seq_len
    per_layer = layer_activation_bytes(m, a) * tokens
    if t.activation_checkpointing:
        saved = m.layers * a * m.hidden * tokens + per_layer  # layer inputs, one layer recomputed
    else:
        saved = m.layers * per_layer
    backward = per_layer  # gradients of one layer's activations while it runs backward
    chunk = min(LOGPROB_CHUNK, t.micro_batch * t.response_len)
    per_logit = a + 12 + (8 if t.scaled_logits else 0)  # logits, fp32 copy and log-softmax (+ logits / T and its own)
    head = chunk * m.vocab * per_logit + (4 * m.hidden + 2 * a * m.hidden) * tokens
    trainable_layer = m.layer_params * (m.trainable / max(m.params, 1))
    return Plan(
        parameters=4 * m.params / t.world,
        gradients=4 * m.trainable / t.world,
        optimizer=8 * m.trainable / t.world,
        fsdp_working_set=a * (m.root_params + 2 * m.layer_params) + (a + 4) * trainable_layer,
        activations=saved + backward + head,
        reserve=GPU_RESERVE_BYTES if t.gpu else 0.0,
        reference=4 * m.params / t.world if t.reference and not t.lora_rank else 0.0,
    )


@dataclass(frozen=True)
class Colocated:
    """COLOCATE's two crowded moments on one GPU, bytes: the step (the trainer's plan and a sleeping server) and the
    weight push (the trainer's fp32 parameter shard, its gathered bucket, the server's weights in ``served_bytes``
    per parameter over ``tp`` GPUs)."""

    step: float
    push: float
    host: float  # host memory of one node for what waits there: the trainer's parameters and optimizer state, the
    # sleeping server's weights

    @property
    def total(self) -> float:
        return max(self.step, self.push)

    def rows(self) -> list[tuple[str, float]]:
        return [
            ("COLOCATE: the step beside a sleeping vLLM", self.step),
            ("COLOCATE: the weight push (trainer parameters + vLLM weights)", self.push),
        ]


def colocated(m: ModelShape, t: TrainShape, p: Plan, *, tp: int, bucket_bytes: int, served_bytes: int = 2) -> Colocated:
    """Per-GPU bytes of the colocated turns for the trainer's plan ``p`` (``train/colocate.py`` has the order)."""
    push = 4 * m.params / t.world + bucket_bytes + served_bytes * m.params / tp + p.reserve + SLEEPING_SERVER_BYTES
    host = 4 * m.params + 8 * m.trainable + served_bytes * m.params
    return Colocated(step=p.total + SLEEPING_SERVER_BYTES, push=push, host=host)
