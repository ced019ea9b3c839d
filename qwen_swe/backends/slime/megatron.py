"""What slime v0.3.x's Megatron actor needs beyond slime's own flags: the model's architecture as Megatron
arguments, the parallel layout, and the HF -> Megatron (torch_dist) conversion of the starting weights.

Megatron does not read config.json: every shape is a flag, as in the ``scripts/models/*.sh`` files slime ships
(``tests/unit/test_slime_plans.py`` checks these arguments against slime v0.3.1's own files for the
architectures listed in ``ARCHITECTURES``). The starting weights are converted once with slime's own
``tools/convert_hf_to_torch_dist.py`` into ``OUTPUT_DIR/ref_torch_dist``; train.py starts from them
(``--ref-load``: "when --load is not set, this will be used as the initial checkpoint for training", and the
reference of the KL loss), and its rollout side keeps ``--hf-checkpoint`` (the HF folder or name) for the tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from qwen_swe.config.settings import Settings
from qwen_swe.errors import SlimeBackendError
from qwen_swe.plan.memory import BUILT_IN
from qwen_swe.supervise import torchrun

ARCHITECTURES = ("llama", "qwen2", "qwen3", "qwen3_moe")  # HF model_type values with known Megatron arguments
CONVERTER = "tools/convert_hf_to_torch_dist.py"
TORCH_DIST_DIR = "ref_torch_dist"
CONVERTED_MARKER = "latest_checkpointed_iteration.txt"  # the converter writes "release" into it last
CONVERT_TIMEOUT = 3 * 3600.0  # a 30B MoE converts in minutes; a stuck NCCL init should not hang the launch forever


def model_config(model: str) -> dict[str, Any]:
    """MODEL's config.json: from the local folder, else the built-in copy of a model the project ships a config
    for (the seed's Qwen3-Coder-30B-A3B); the launcher never reaches the hub."""
    local = Path(model).expanduser()
    path = local / "config.json" if local.is_dir() else local
    if not path.is_file():
        name = model.rstrip("/").rsplit("/", 1)[-1].lower()
        path = next((p for key, p in BUILT_IN.items() if name.startswith(key)), path)
    if not path.is_file():
        raise SlimeBackendError(
            f"MODEL={model}: no config.json to derive Megatron's model arguments from; set MODEL "
            "to a local Hugging Face folder (Megatron has no hub access at launch)"
        )
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SlimeBackendError(
            f"MODEL={model}: cannot read {path} ({exc}); give a folder with a valid config.json"
        ) from None


def _rope_theta(c: dict[str, Any]) -> float:
    """transformers 4 keeps ``rope_theta`` at the top; 5 moves it into ``rope_parameters``."""
    theta = c.get("rope_theta") or (c.get("rope_parameters") or {}).get("rope_theta")
    if theta is None:
        raise SlimeBackendError("config.json has no rope_theta (nor rope_parameters.rope_theta)")
    return float(theta)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def model_args(c: dict[str, Any]) -> list[str]:
    """Megatron's architecture arguments for an HF config, in the form of slime's ``scripts/models`` files."""
    kind = c.get("model_type")
    if kind not in ARCHITECTURES:
        raise SlimeBackendError(
            f"MODEL's model_type {kind!r} has no Megatron arguments here; supported under "
            f"slime 0.3.x: {', '.join(ARCHITECTURES)} (or BACKEND=fsdp / slime v0.2.2)"
        )
    if c.get("hidden_act", "silu") != "silu":
        raise SlimeBackendError(f"MODEL's hidden_act {c['hidden_act']!r}: Megatron's --swiglu needs silu")
    heads, groups = c["num_attention_heads"], c.get("num_key_value_heads") or c["num_attention_heads"]
    argv = [
        "--swiglu",
        "--num-layers",
        str(c["num_hidden_layers"]),
        "--hidden-size",
        str(c["hidden_size"]),
        "--ffn-hidden-size",
        str(c["intermediate_size"]),
        "--num-attention-heads",
        str(heads),
        "--disable-bias-linear",
        "--normalization",
        "RMSNorm",
        "--norm-epsilon",
        _num(c["rms_norm_eps"]),
        "--rotary-base",
        _num(_rope_theta(c)),
        "--vocab-size",
        str(c["vocab_size"]),
    ]
    if groups != heads:
        argv += ["--group-query-attention", "--num-query-groups", str(groups)]
    if c.get("head_dim"):
        argv += ["--kv-channels", str(c["head_dim"])]
    if not c.get("tie_word_embeddings", False):
        argv.append("--untie-embeddings-and-output-weights")
    if kind in ("qwen3", "qwen3_moe"):
        argv.append("--qk-layernorm")
    if kind == "qwen2":
        argv.append("--add-qkv-bias")
    if kind == "llama":
        argv += ["--max-position-embeddings", str(c["max_position_embeddings"])]
        scaling = c.get("rope_scaling") or {}
        if scaling.get("rope_type", scaling.get("type")) == "llama3":
            argv += ["--use-rope-scaling", "--rotary-scaling-factor", _num(scaling["factor"])]
    if kind == "qwen3_moe":
        argv += ["--position-embedding-type", "rope", "--rotary-percent", "1.0"] + _moe_args(c)
    else:
        argv.append("--use-rotary-position-embeddings")
    return argv


def _moe_args(c: dict[str, Any]) -> list[str]:
    """Qwen3-MoE's experts, as slime's qwen3-30B-A3B.sh passes them (every layer sparse unless listed dense)."""
    dense, step = set(c.get("mlp_only_layers") or []), c.get("decoder_sparse_step", 1) or 1
    freq = [0 if i in dense or (i + 1) % step else 1 for i in range(c["num_hidden_layers"])]
    return [
        "--moe-ffn-hidden-size",
        str(c["moe_intermediate_size"]),
        "--moe-router-score-function",
        "softmax",
        "--moe-token-dispatcher-type",
        "alltoall",
        "--moe-router-topk",
        str(c["num_experts_per_tok"]),
        "--moe-layer-freq",
        "[" + ",".join(map(str, freq)) + "]",
        "--num-experts",
        str(c["num_experts"]),
        "--moe-grouped-gemm",
        "--moe-token-drop-policy",
        "probs",
        "--moe-router-dtype",
        "fp32",
        "--moe-permute-fusion",
        "--moe-aux-loss-coeff",
        _num(c.get("router_aux_loss_coef", 0.0)),
    ]


def parallel_args(s: Settings, c: dict[str, Any], gpus: int) -> tuple[list[str], list[str]]:
    """(Megatron's parallel arguments from SLIME_TP and SLIME_EP, problems with them on ``gpus`` GPUs)."""
    tp, ep, problems = s.slime_tp, s.slime_ep, []
    heads, groups = c["num_attention_heads"], c.get("num_key_value_heads") or c["num_attention_heads"]
    if gpus % tp or heads % tp or groups % tp:
        problems.append(
            f"SLIME_TP={tp} must divide the {gpus} training GPUs (SLIME_GPUS), the model's {heads} "
            f"attention heads and its {groups} key-value heads"
        )
    experts = c.get("num_experts") or 0
    if ep > 1 and not experts:
        problems.append(f"SLIME_EP={ep} but MODEL is dense (no num_experts in config.json): set SLIME_EP=1")
    elif experts and (gpus % ep or experts % ep):
        problems.append(f"SLIME_EP={ep} must divide the {gpus} training GPUs and the model's {experts} experts")
    argv = ["--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", "1"]
    if tp > 1:
        argv.append("--sequence-parallel")  # slime's run scripts pair them: activations sharded along with weights
    if experts:
        argv += ["--expert-model-parallel-size", str(ep), "--expert-tensor-parallel-size", "1"]
    return argv, problems


def torch_dist_dir(s: Settings) -> Path:
    return Path(s.output_dir) / TORCH_DIST_DIR


def conversion_argv(s: Settings, python: str, c: dict[str, Any], gpus: int) -> list[str]:
    """slime's converter on ``min(gpus, layers)`` processes (it pipelines the layers over them)."""
    procs = max(1, min(gpus, c["num_hidden_layers"]))
    entry = [CONVERTER, *model_args(c), "--hf-checkpoint", s.model_name, "--save", str(torch_dist_dir(s))]
    # torchrun's default rendezvous, as in the command slime documents for its converter
    return torchrun(procs, Path(s.output_dir) / "logs" / "torchrun-convert", entry, python=python, standalone=False)
