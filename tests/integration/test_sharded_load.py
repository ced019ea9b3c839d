"""Sharded loading (WEIGHT_LOADING=meta) on 2 gloo ranks against today's full load (WEIGHT_LOADING=full).

Run as a module (``-m tests.integration.test_sharded_load MODEL OUT LORA``) it is the torchrun worker: it builds
the policy both ways, compares every local shard bit for bit, trains one identical step on each and compares the
shards again, and writes what it found as JSON per rank.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from qwen_swe.paths import REPO_ROOT, embedded_model_dir
from qwen_swe.supervise import run_rank, torchrun
from tests.tiny_model import tiny_model_dir


def _tiny_moe_dir() -> Path:
    """A seeded random tiny Qwen3-MoE: per-expert tensors on disk, fused experts in the transformers 5 model."""
    import tempfile

    from transformers import AutoModelForCausalLM, Qwen3MoeConfig

    folder = Path(tempfile.gettempdir()) / "qwen_swe_test_models" / "tiny-qwen3-moe-v1"
    if (folder / "config.json").exists():
        return folder
    cfg = Qwen3MoeConfig(
        vocab_size=6000,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        num_experts=5,
        num_experts_per_tok=2,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    work = folder.with_name(folder.name + f".{os.getpid()}")
    AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(str(work))
    try:
        os.rename(work, folder)
    except OSError:  # another process made it first
        pass
    return folder


def _worker(model: str, out: Path, lora: int) -> None:
    import torch.distributed as dist

    from qwen_swe.config.settings import Settings
    from qwen_swe.train.policy import build_policy
    from qwen_swe.train.update import clip_and_step, train_on_batch

    dist.init_process_group("gloo")
    rank, cpu = dist.get_rank(), torch.device("cpu")
    settings = Settings.build(vllm_url="http://127.0.0.1:9", micro_batch_size=2)
    rng = random.Random(3)
    items = []
    for i in range(4):
        p, r = rng.randint(3, 8), rng.randint(3, 10)
        items.append(
            {
                "tokens": [rng.randrange(100, 5000) for _ in range(p + r)],
                "response_length": r,
                "loss_mask": [1] * r,
                "advantage": (-1.0) ** i,
                "rollout_log_probs": None,
            }
        )

    def build(mode: str):
        torch.manual_seed(7)  # the trainer seeds before building: LoRA's initial draws must match
        policy = build_policy(model, device=cpu, lora_rank=lora, weight_loading=mode)
        return policy, torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-3, weight_decay=0.0)

    def shards(policy) -> list[tuple[str, torch.Tensor]]:
        return [(n, p.to_local().detach().clone()) for n, p in policy.named_parameters()]

    full, full_opt = build("full")
    meta, meta_opt = build("meta")
    a, b = shards(full), shards(meta)
    names_equal = [n for n, _ in a] == [n for n, _ in b]
    load_diff = [n for (n, x), (_, y) in zip(a, b) if x.dtype != y.dtype or not torch.equal(x, y)]
    buffers_diff = [n for (n, x), (_, y) in zip(full.named_buffers(), meta.named_buffers()) if not torch.equal(x, y)]
    sharded = sum(x.numel() for _, x in b) < sum(p.numel() for p in meta.parameters())
    for policy, opt in ((full, full_opt), (meta, meta_opt)):
        train_on_batch(policy, items, settings, cpu)
        clip_and_step(policy, opt, 1.0)
    step_diff = [n for (n, x), (_, y) in zip(shards(full), shards(meta)) if not torch.equal(x, y)]
    moved = sum(not torch.equal(x, y) for (_, x), (_, y) in zip(a, shards(full)))
    (out / f"rank{rank}.json").write_text(
        json.dumps(
            {
                "params": len(a),
                "names_equal": names_equal,
                "load_diff": load_diff,
                "buffers_diff": buffers_diff,
                "step_diff": step_diff,
                "moved_by_step": moved,
                "sharded": sharded,
                "trainable": sum(p.requires_grad for p in meta.parameters()),
            }
        )
    )
    dist.destroy_process_group()


def _run(model: Path, out: Path, lora: int = 0) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)}
    cmd = torchrun(2, out / "torchrun", ["-m", "tests.integration.test_sharded_load", str(model), str(out), str(lora)])
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.fail(f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def _assert_same(ranks: list[dict]) -> None:
    for r in ranks:
        assert r["names_equal"] and r["params"] > 0 and r["sharded"]
        assert r["load_diff"] == [] and r["buffers_diff"] == []
        assert r["moved_by_step"] > 0  # the step changed weights, so equal-after-step is a real check
        assert r["step_diff"] == []


def test_meta_load_equals_full_load_and_trains_the_same(tmp_path):
    _assert_same(_run(tiny_model_dir(), tmp_path))


def test_meta_load_with_lora_draws_the_same_adapter(tmp_path):
    ranks = _run(tiny_model_dir(), tmp_path, lora=4)
    _assert_same(ranks)
    assert 0 < ranks[0]["trainable"] < ranks[0]["params"]


def test_meta_load_assembles_fused_moe_experts(tmp_path):
    _assert_same(_run(_tiny_moe_dir(), tmp_path))


def test_trainer_with_weight_loading_meta_exports_what_it_trains(tmp_path):
    from tests.integration.test_trainer_fsdp import metrics_rows, run_trainer

    run_trainer(tmp_path / "run", str(tiny_model_dir()), steps=2, weight_loading="meta")
    rows = metrics_rows(tmp_path / "run")
    assert [r["weight_version"] for r in rows] == [1, 2]
    # step 2 was sampled from the v1 export: the policy it trained is the one it loaded and exported
    assert abs(rows[1]["ratio_mean"] - 1) < 1e-5 and rows[1]["approx_kl"] < 1e-6


@pytest.mark.slow
def test_meta_load_smollm2(tmp_path):
    model = embedded_model_dir()
    if not (model / "config.json").exists():
        pytest.skip(f"no SmolLM2 folder at {model}; it is made by scripts/setup/50_model.sh")
    _assert_same(_run(model, tmp_path))


def test_meta_load_without_safetensors_names_the_fix(tmp_path):
    from qwen_swe.errors import TrainerError
    from qwen_swe.train.loading import SafetensorsIndex

    with pytest.raises(TrainerError, match="WEIGHT_LOADING=full"):
        SafetensorsIndex(tmp_path)


if __name__ == "__main__":  # a torchrun worker
    run_rank(lambda: _worker(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])))
