"""One GRPO training step on 2 gloo ranks (FSDP2, CPU): tokens/s, and the chunked response log-probs
against the full-logits reference (``[B*T, vocab]`` fp32 logits at once) measured in the same run; with
``--mixed-precision`` also bf16 compute (``MIXED_PRECISION=true``) against the fp32 chunked step; with ``--recompute``
the bf16 step with recomputed activations (``ACTIVATION_CHECKPOINTING=true``, the warm start's SFT before it ran
without) against the same step without.

Each (model, variant) runs in its own torchrun so peak memory is not shared between variants. Peak memory
is the rise of the kernel's peak RSS (VmHWM, reset via /proc/self/clear_refs) over the RSS before the
timed steps, per rank; glibc is told to return large frees to the OS so the rise is the step's own.

Run: .venv/bin/python -m benchmarks.bench_train_step [--samples 4] [--tokens 256] [--prompt 64] [--steps 2]
     [--mixed-precision] [--recompute]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from qwen_swe.paths import REPO_ROOT, embedded_model_dir
from qwen_swe.supervise import run_rank, torchrun


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def worker(
    model: str,
    chunk: int,
    samples: int,
    tokens: int,
    prompt: int,
    steps: int,
    out: Path,
    mixed_precision: bool = False,
    recompute: bool = False,
) -> None:
    """torchrun worker: warm-up step, then ``steps`` timed steps; rank 0 writes the figures."""
    import torch
    import torch.distributed as dist

    from qwen_swe.config.settings import Settings
    from qwen_swe.train.policy import build_policy
    from qwen_swe.train.update import clip_and_step, train_on_batch

    dist.init_process_group("gloo")
    cpu = torch.device("cpu")
    torch.manual_seed(0)
    policy = build_policy(
        model, device=cpu, chunk_size=chunk, mixed_precision=mixed_precision, activation_checkpointing=recompute
    )
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-6, weight_decay=0.0)
    settings = Settings.build(vllm_url="http://127.0.0.1:9", micro_batch_size=samples)
    rng = random.Random(0)
    items = [
        {
            "tokens": [rng.randrange(100, 20000) for _ in range(tokens)],
            "response_length": tokens - prompt,
            "loss_mask": [1] * (tokens - prompt),
            "advantage": (1.0, -0.5, 0.25, -0.75)[i % 4],
            "rollout_log_probs": None,
        }
        for i in range(samples)
    ]

    def step() -> dict:
        m = train_on_batch(policy, items, settings, cpu)
        m["grad_norm"] = clip_and_step(policy, opt, 1.0)
        return m

    step()
    dist.barrier()
    base_kb = _status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    times, metrics = [], {}
    for _ in range(steps):
        dist.barrier()
        t0 = time.perf_counter()
        metrics = step()
        times.append(time.perf_counter() - t0)
    peak = torch.tensor([(_status_kb("VmHWM") - base_kb) / 1024.0, max(times)], dtype=torch.float64)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        out.write_text(
            json.dumps(
                {
                    "step_s": min(times),
                    "peak_rise_mb": float(peak[0]),
                    "loss": metrics["loss"],
                    "grad_norm": metrics["grad_norm"],
                }
            )
        )
    dist.destroy_process_group()


def run_variant(
    model: str, chunk: int, args: argparse.Namespace, mixed_precision: bool = False, recompute: bool = False
) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        entry = [
            "-m",
            "benchmarks.bench_train_step",
            "--worker",
            model,
            str(chunk),
            str(args.samples),
            str(args.tokens),
            str(args.prompt),
            str(args.steps),
            str(out),
            str(int(mixed_precision)),
            str(int(recompute)),
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
            sys.exit(f"benchmark worker failed for {model} (chunk {chunk}):\n{proc.stderr[-4000:]}")
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        m, chunk, samples, tokens, prompt, steps, out, mixed, recompute = argv[1:10]
        run_rank(
            lambda: worker(
                m,
                int(chunk),
                int(samples),
                int(tokens),
                int(prompt),
                int(steps),
                Path(out),
                mixed == "1",
                recompute == "1",
            )
        )
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens per sample (not trained)")
    parser.add_argument("--steps", type=int, default=2, help="timed steps after one warm-up (best is reported)")
    parser.add_argument("--chunk", type=int, default=256, help="lm_head chunk (response tokens)")
    parser.add_argument(
        "--mixed-precision",
        action="store_true",
        help="also time bf16 compute (MIXED_PRECISION) against the fp32 chunked step",
    )
    parser.add_argument(
        "--recompute",
        action="store_true",
        help="time only the bf16 step with recomputed activations against the bf16 step without",
    )
    args = parser.parse_args(argv)

    from tests.tiny_model import tiny_model_dir

    models = [("tiny Qwen3 (9.8M, vocab 151936)", str(tiny_model_dir()))]
    if (embedded_model_dir() / "config.json").exists():
        models.append(("SmolLM2-135M (vocab 49152)", str(embedded_model_dir())))
    else:
        print(f"SmolLM2 skipped: no folder at {embedded_model_dir()} (scripts/setup/50_model.sh makes it)")

    print(f"command: .venv/bin/python -m benchmarks.bench_train_step {' '.join(argv)}".rstrip())
    print(
        f"batch: {args.samples} samples x {args.tokens} tokens ({args.tokens - args.prompt} response tokens each), "
        f"2 gloo ranks, fp32, 1 thread per rank, best of {args.steps} steps after a warm-up"
    )
    global_tokens = args.samples * args.tokens

    def line(label: str, r: dict) -> None:
        print(
            f"  {label:34s} step {r['step_s']:6.2f} s  {global_tokens / r['step_s']:7.0f} tokens/s  "
            f"peak RSS rise per rank {r['peak_rise_mb']:7.0f} MB  grad norm {r['grad_norm']:.6f}"
        )

    for name, path in models:
        if args.recompute:
            plain = run_variant(path, args.chunk, args, mixed_precision=True)
            again = run_variant(path, args.chunk, args, mixed_precision=True, recompute=True)
            print(f"{name}:")
            line("bf16, activations kept", plain)
            line("bf16, activations recomputed", again)
            print(
                f"  ratio recomputed/kept: time {again['step_s'] / plain['step_s']:.2f}x, peak memory "
                f"{again['peak_rise_mb'] / max(plain['peak_rise_mb'], 1e-9):.2f}x, grad norm equal: "
                f"{again['grad_norm'] == plain['grad_norm']}"
            )
            continue
        chunked = run_variant(path, args.chunk, args)
        full = run_variant(path, 0, args)
        print(f"{name}:")
        line(f"chunked log-probs (chunk {args.chunk})", chunked)
        line("full-logits reference", full)
        print(
            f"  ratio chunked/full: time {chunked['step_s'] / full['step_s']:.2f}x, "
            f"peak memory {chunked['peak_rise_mb'] / max(full['peak_rise_mb'], 1e-9):.2f}x, "
            f"relative grad-norm difference {abs(chunked['grad_norm'] / full['grad_norm'] - 1):.1e}"
        )
        if args.mixed_precision:
            bf16 = run_variant(path, args.chunk, args, mixed_precision=True)
            line("bf16 compute (MIXED_PRECISION)", bf16)
            print(
                f"  ratio bf16/fp32 (chunked): time {bf16['step_s'] / chunked['step_s']:.2f}x, "
                f"relative grad-norm difference {abs(bf16['grad_norm'] / chunked['grad_norm'] - 1):.1e}"
            )


if __name__ == "__main__":
    main()
