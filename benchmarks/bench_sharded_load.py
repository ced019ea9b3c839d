"""Peak memory per rank while building the FSDP2 policy: sharded loading (WEIGHT_LOADING=meta) against today's
full load (WEIGHT_LOADING=full), measured in the same run, on 2 gloo ranks.

Each mode runs in its own torchrun. Per rank: RSS after torch, FSDP, the model's transformers module and the
process group are loaded (the baseline, the same in both modes), then the kernel's peak RSS (VmHWM, reset via
/proc/self/clear_refs) over ``build_policy``, and a digest of every local shard, so the two modes are also checked
to load the same bits.

Run: .venv/bin/python -m benchmarks.bench_sharded_load [--model DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
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


def worker(model: str, mode: str, out: Path) -> None:
    """torchrun worker: build the policy once in ``mode``; every rank writes its figures."""
    import torch
    import torch.distributed as dist
    import torch.distributed.fsdp  # noqa: F401 - the code build_policy runs is imported before the baseline
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    from qwen_swe.train.policy import build_policy

    MODEL_FOR_CAUSAL_LM_MAPPING[type(AutoConfig.from_pretrained(model))]  # imports the model's module
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()
    base_kb = _status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    t0 = time.perf_counter()
    policy = build_policy(model, device=torch.device("cpu"), weight_loading=mode)
    seconds = time.perf_counter() - t0
    peak_kb, after_kb = _status_kb("VmHWM"), _status_kb("VmRSS")
    digest = hashlib.sha256()
    local_bytes = 0
    for name, p in policy.named_parameters():
        local = p.to_local().detach().contiguous()
        digest.update(name.encode())
        digest.update(local.view(torch.uint8).numpy().tobytes() if local.numel() else b"")
        local_bytes += local.numel() * local.element_size()
    (out / f"rank{rank}.json").write_text(
        json.dumps(
            {
                "base_mb": base_kb / 1024,
                "peak_mb": peak_kb / 1024,
                "after_mb": after_kb / 1024,
                "seconds": seconds,
                "digest": digest.hexdigest(),
                "local_mb": local_bytes / 2**20,
            }
        )
    )
    dist.barrier()
    dist.destroy_process_group()


def run_mode(model: str, mode: str) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        entry = [
            "-m",
            "benchmarks.bench_sharded_load",
            "--worker",
            model,
            mode,
            tmp,
        ]
        cmd = torchrun(2, Path(tmp) / "torchrun", entry)  # removed with tmp
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)}
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800)
        files = [Path(tmp) / f"rank{r}.json" for r in range(2)]
        if proc.returncode != 0 or not all(f.exists() for f in files):
            sys.exit(f"benchmark worker failed ({mode}):\n{proc.stderr[-4000:]}")
        return [json.loads(f.read_text()) for f in files]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        run_rank(lambda: worker(argv[1], argv[2], Path(argv[3])))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(embedded_model_dir()), help="HF folder (default: SmolLM2-135M)")
    args = parser.parse_args(argv)
    if not (Path(args.model) / "config.json").exists():
        sys.exit(f"no model folder at {args.model} (scripts/setup/50_model.sh makes the SmolLM2 one)")
    print(f"command: .venv/bin/python -m benchmarks.bench_sharded_load {' '.join(argv)}".rstrip())
    print(f"model: {args.model}; 2 gloo ranks, fp32 master weights, 1 thread per rank")
    results = {mode: run_mode(args.model, mode) for mode in ("full", "meta")}
    for mode, ranks in results.items():
        for r, x in enumerate(ranks):
            print(
                f"  {mode:4s} rank {r}: baseline {x['base_mb']:6.0f} MB  peak {x['peak_mb']:6.0f} MB  "
                f"(rise {x['peak_mb'] - x['base_mb']:5.0f} MB)  after load {x['after_mb']:6.0f} MB  "
                f"local shard {x['local_mb']:5.0f} MB  {x['seconds']:5.2f} s"
            )
    full, meta = results["full"], results["meta"]
    peak = max(x["peak_mb"] for x in meta) / max(x["peak_mb"] for x in full)
    rise = max(x["peak_mb"] - x["base_mb"] for x in meta) / max(x["peak_mb"] - x["base_mb"] for x in full)
    same = all(a["digest"] == b["digest"] for a, b in zip(full, meta))
    print(
        f"ratio meta/full: peak RSS per rank {peak:.2f}x (target <= 0.6x), rise over the baseline {rise:.2f}x; "
        f"load time {max(x['seconds'] for x in meta) / max(x['seconds'] for x in full):.2f}x; "
        f"local shards bit-identical: {same}"
    )


if __name__ == "__main__":
    main()
