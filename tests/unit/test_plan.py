"""The memory plan: exact parameter counts, the per-layer activation model against what autograd really saves
(counted with saved-tensor hooks on CPU), and the CLI's verdicts and errors."""

from __future__ import annotations

import json

import pytest
import torch

from qwen_swe.paths import embedded_model_dir
from qwen_swe.plan.__main__ import main
from qwen_swe.plan.memory import GIB, TrainShape, layer_activation_bytes, model_shape, plan
from tests.tiny_model import tiny_model_dir

TINY_MOE = dict(
    model_type="qwen3_moe",
    vocab_size=6000,
    hidden_size=64,
    intermediate_size=128,
    moe_intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    num_experts=8,
    num_experts_per_tok=2,
)


def _saved_bytes_per_token(cfg: dict, layers: int, dtype: torch.dtype, tokens: int = 1024) -> float:
    """What autograd saves in the decoder's forward (parameters excluded), per token."""
    from transformers import AutoConfig, AutoModelForCausalLM

    data = {**cfg, "num_hidden_layers": layers}
    data.pop("layer_types", None)  # saved configs list one type per layer; rebuilt from the new count
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(data.pop("model_type"), **data), dtype=dtype)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            seen[ptr] = max(seen.get(ptr, 0), t.untyped_storage().nbytes())
        return t

    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (2, tokens // 2))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.train().get_decoder()(input_ids=ids, use_cache=False)
    return sum(seen.values()) / tokens


def _configs() -> list[tuple[str, dict]]:
    out = [("tiny qwen3", json.loads((tiny_model_dir() / "config.json").read_text())), ("tiny qwen3_moe", TINY_MOE)]
    if (embedded_model_dir() / "config.json").exists():
        out.append(("smollm2", json.loads((embedded_model_dir() / "config.json").read_text())))
    return out


@pytest.mark.parametrize("name,cfg", _configs(), ids=[n for n, _ in _configs()])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_layer_activation_model_matches_what_autograd_saves(tmp_path, name, cfg, dtype):
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shape = model_shape(str(tmp_path))
    measured = _saved_bytes_per_token(cfg, 2, dtype) - _saved_bytes_per_token(cfg, 1, dtype)  # one layer
    planned = layer_activation_bytes(shape, 4 if dtype == torch.float32 else 2)
    assert planned == pytest.approx(measured, rel=0.02), (name, planned, measured)


def test_parameter_counts_are_exact():
    from transformers import AutoModelForCausalLM

    real = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir()))
    shape = model_shape(str(tiny_model_dir()))
    assert shape.params == sum(p.numel() for p in real.parameters())
    assert shape.layers == 2 and shape.root_params + 2 * shape.layer_params == shape.params
    lora = model_shape(str(tiny_model_dir()), lora_rank=4)
    assert 0 < lora.trainable < shape.params < lora.params


def test_seed_model_matches_its_published_checkpoint():
    shape = model_shape("qwen3-coder-30b-a3b")
    # the checkpoint's model.safetensors.index.json: total_size 61064245248 bytes of bf16
    assert shape.params * 2 == 61_064_245_248
    assert (shape.experts, shape.top_k, shape.layers) == (128, 8, 48)


def test_plan_scales_with_the_settings():
    shape = model_shape(str(tiny_model_dir()))
    base = TrainShape(world=2, micro_batch=1, seq_len=1024, response_len=512)
    two = plan(shape, TrainShape(world=4, micro_batch=1, seq_len=1024, response_len=512))
    assert plan(shape, base).parameters == 2 * two.parameters
    ckpt = plan(shape, TrainShape(2, 1, 8192, 4096, activation_checkpointing=True))
    assert ckpt.activations < plan(shape, TrainShape(2, 1, 8192, 4096)).activations


def test_cli_says_whether_the_seed_configuration_fits(capsys):
    args = [
        "--config",
        "qwen3-coder-30b-a3b",
        "--gpu-memory-gb",
        "80",
        "--train-procs",
        "8",
        "--max-response-len",
        "14336",
        "--mixed-precision",
        "true",
    ]
    assert main([*args, "--activation-checkpointing", "true"]) == 0
    assert "fits" in capsys.readouterr().out
    assert main([*args, "--activation-checkpointing", "false"]) == 1
    assert "does NOT fit" in capsys.readouterr().out


def test_cli_plans_the_colocated_turns(capsys):
    """COLOCATE=true at TP 8: the step carries a sleeping server's 2 GiB, the push the server's bf16 weights."""
    args = [
        "--config",
        "qwen3-coder-30b-a3b",
        "--train-procs",
        "8",
        "--activation-checkpointing",
        "true",
        "--mixed-precision",
        "true",
        "--tp",
        "8",
    ]
    assert main([*args, "--colocate", "true"]) == 0
    out = capsys.readouterr().out
    assert "total per GPU                                                           77.68 GiB" in out
    assert "COLOCATE: the step beside a sleeping vLLM                               79.68 GiB" in out
    assert "COLOCATE: the weight push (trainer parameters + vLLM weights)           26.58 GiB" in out
    assert "COLOCATE: host memory of the node (parked trainer, sleeping server)    398.09 GiB" in out
    assert main(args) == 0 and "COLOCATE" not in capsys.readouterr().out


def test_cli_names_a_bad_config_and_a_bad_setting(capsys, tmp_path):
    assert main(["--config", str(tmp_path / "nope.json")]) == 2
    assert "--config" in capsys.readouterr().err
    assert main(["--config", "qwen3-coder-30b-a3b", "--micro-batch-size", "0"]) == 2
    assert "MICRO_BATCH_SIZE" in capsys.readouterr().err
    assert plan(model_shape("qwen3-coder-30b-a3b"), TrainShape(8, 1, 4096, 2048)).total > 80 * GIB


def test_a_kl_reference_adds_a_sharded_fp32_copy_unless_lora_supplies_it(capsys):
    shape = model_shape("qwen3-coder-30b-a3b")
    plain = plan(shape, TrainShape(8, 1, 4096, 2048))
    kl = plan(shape, TrainShape(8, 1, 4096, 2048, reference=True))
    assert kl.total - plain.total == pytest.approx(4 * shape.params / 8) and kl.reference == plain.parameters
    lora = model_shape("qwen3-coder-30b-a3b", lora_rank=16)
    assert plan(lora, TrainShape(8, 1, 4096, 2048, lora_rank=16, reference=True)).reference == 0.0
    main(["--config", "qwen3-coder-30b-a3b", "--kl-loss-coef", "0.04"])
    assert "reference model for KL_LOSS_COEF" in capsys.readouterr().out


def test_log_probs_at_a_temperature_count_a_second_log_softmax_per_chunk():
    shape = model_shape("qwen3-coder-30b-a3b")
    plain = plan(shape, TrainShape(8, 1, 4096, 2048))
    scaled = plan(shape, TrainShape(8, 1, 4096, 2048, scaled_logits=True))
    assert scaled.activations - plain.activations == pytest.approx(256 * shape.vocab * 8)  # one chunk, 2 x fp32
