"""The memory plan (``python -m qwen_swe.plan``) against measured peaks: one GRPO step on 2 gloo ranks (CPU).

Per rank, in one torchrun per configuration: RSS once torch, the model's module and the process group are
loaded (the baseline), the rise after ``build_policy`` (the plan's parameters) and the peak RSS rise (VmHWM, reset
via /proc/self/clear_refs) over the baseline during a training step after a warm-up step (so AdamW's state
exists), against the plan's total for the same model and settings with the CPU profile (no CUDA reserve).

Run: .venv/bin/python -m benchmarks.bench_memory_plan [--tokens 512] [--samples 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from qwen_swe.paths import REPO_ROOT, embedded_model_dir
from qwen_swe.supervise import run_rank, torchrun


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def worker(model: str, tokens: int, samples: int, ckpt: bool, lora: int, out: Path) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.fsdp  # noqa: F401 - loaded before the baseline
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    from qwen_swe.config.settings import Settings
    from qwen_swe.train.policy import build_policy
    from qwen_swe.train.update import clip_and_step, train_on_batch

    MODEL_FOR_CAUSAL_LM_MAPPING[type(AutoConfig.from_pretrained(model))]
    dist.init_process_group("gloo")
    cpu = torch.device("cpu")
    dist.barrier()
    base = _status_kb("VmRSS")
    policy = build_policy(model, device=cpu, activation_checkpointing=ckpt, weight_loading="meta", lora_rank=lora)
    built = _status_kb("VmRSS")
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-6, weight_decay=0.0)
    settings = Settings.build(vllm_url="http://127.0.0.1:9", micro_batch_size=samples)
    rng = random.Random(0)
    prompt = tokens // 4
    items = [
        {
            "tokens": [rng.randrange(100, 5000) for _ in range(tokens)],
            "response_length": tokens - prompt,
            "loss_mask": [1] * (tokens - prompt),
            "advantage": (1.0, -1.0)[i % 2],
            "rollout_log_probs": None,
        }
        for i in range(2 * samples)
    ]  # one micro-batch of ``samples`` per rank

    def step() -> None:
        train_on_batch(policy, items, settings, cpu)
        clip_and_step(policy, opt, 1.0)

    step()
    dist.barrier()
    Path("/proc/self/clear_refs").write_text("5")
    step()
    peak = _status_kb("VmHWM")
    if dist.get_rank() == 0:
        out.write_text(
            json.dumps({"params_mb": (built - base) / 1024, "peak_mb": (peak - base) / 1024, "prompt": prompt})
        )
    dist.destroy_process_group()


def measure(model: str, tokens: int, samples: int, ckpt: bool, lora: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        entry = [
            "-m",
            "benchmarks.bench_memory_plan",
            "--worker",
            model,
            str(tokens),
            str(samples),
            str(int(ckpt)),
            str(lora),
            str(out),
        ]
        cmd = torchrun(2, Path(tmp) / "torchrun", entry)  # removed with tmp
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "MALLOC_MMAP_THRESHOLD_": "65536",
            "PYTHONPATH": str(REPO_ROOT),
        }
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0 or not out.exists():
            sys.exit(f"benchmark worker failed for {model}:\n{proc.stderr[-4000:]}")
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        run_rank(lambda: worker(argv[1], int(argv[2]), int(argv[3]), argv[4] == "1", int(argv[5]), Path(argv[6])))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=512, help="tokens per sample (a quarter is prompt)")
    parser.add_argument("--samples", type=int, default=2, help="micro-batch per rank")
    args = parser.parse_args(argv)

    from qwen_swe.plan.memory import TrainShape, model_shape, plan
    from tests.tiny_model import tiny_model_dir

    models = [("tiny Qwen3", str(tiny_model_dir()))]
    if (embedded_model_dir() / "config.json").exists():
        models.append(("SmolLM2-135M", str(embedded_model_dir())))
    print(f"command: .venv/bin/python -m benchmarks.bench_memory_plan {' '.join(argv)}".rstrip())
    print(f"2 gloo ranks, fp32, micro-batch {args.samples} x {args.tokens} tokens per rank, WEIGHT_LOADING=meta")
    for name, path in models:
        for ckpt, lora in ((False, 0), (True, 0), (False, 16)):
            shape = model_shape(path, lora_rank=lora)
            got = measure(path, args.tokens, args.samples, ckpt, lora)
            p = plan(
                shape,
                TrainShape(
                    world=2,
                    micro_batch=args.samples,
                    seq_len=args.tokens,
                    response_len=args.tokens - got["prompt"],
                    lora_rank=lora,
                    activation_checkpointing=ckpt,
                    gpu=False,
                ),
            )
            mb = 2**20
            print(
                f"  {name}, activation checkpointing {'on ' if ckpt else 'off'}, LoRA rank {lora:2d}: "
                "parameters planned "
                f"{p.parameters / mb:6.0f} MB, measured {got['params_mb']:6.0f} MB "
                f"({p.parameters / mb / got['params_mb']:.2f}x); step peak planned {p.total / mb:6.0f} MB "
                f"(activations {p.activations / mb:5.0f}), measured {got['peak_mb']:6.0f} MB: "
                f"plan/measured {p.total / mb / got['peak_mb']:.2f}x"
            )


if __name__ == "__main__":
    main()
