"""Weight sync into the real vLLM CPU server, SmolLM2-135M from 2 gloo trainer ranks: WEIGHT_SYNC=broadcast
(bucket by bucket into the worker over a gloo group, bf16, no disk) against today's disk path (gather the full
state dict, write an HF folder, ``reload_weights``), measured in the same run against the same server.

Starts its own embedded server (with the broadcast worker extension) on a free port and stops it by its process
group. Both paths are timed from the trained shards to the server answering with the new weights (pause, load,
prefix-cache reset, resume included); the server's answers after each are compared too.

LoRA case (rank 4, a trained adapter): broadcast of the adapter only (fp32 A and B; the worker merges them into its
base weights) against broadcast of the adapted layers merged on the trainer (bf16, the previous way) and the disk
path, in the same run against the same server.

Run: .venv/bin/python -m benchmarks.bench_weight_sync
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from qwen_swe.config import settings as config
from qwen_swe.inference.embedded_server import embedded_server
from qwen_swe.paths import embedded_model_dir
from tests.vllm_sync import run_against


def main() -> None:
    if not (embedded_model_dir() / "config.json").exists():
        sys.exit(f"no SmolLM2 folder at {embedded_model_dir()} (scripts/setup/50_model.sh makes it)")
    print("command: .venv/bin/python -m benchmarks.bench_weight_sync")
    settings = config.load_settings([], env={"WEIGHT_SYNC": "broadcast"})
    with tempfile.TemporaryDirectory() as tmp, embedded_server(settings, log_dir=Path(tmp) / "logs") as url:
        r = run_against(url, Path(tmp) / "full")
        lo = run_against(url, Path(tmp) / "lora", lora=4)
    m = r["metrics"]
    print("full fine-tuning:")
    print(f"  disk (gather + write HF folder + reload_weights): {r['disk_seconds']:.2f} s")
    print(
        f"  broadcast ({m['sync/broadcast_buckets']:.0f} buckets, {m['sync/broadcast_bytes'] / 2**20:.0f} MiB bf16): "
        f"{r['broadcast_seconds']:.2f} s"
    )
    print(
        f"  ratio broadcast/disk: {r['broadcast_seconds'] / r['disk_seconds']:.2f}x; server answers identical: "
        f"{r['broadcast'] == r['disk']}; changed from the original: {r['broadcast'] != r['before']}"
    )
    a, mm = lo["metrics"], lo["merged_metrics"]
    print("LoRA rank 4:")
    print(f"  disk (gather, merge, write HF folder, reload_weights): {lo['disk_seconds']:.2f} s")
    print(
        f"  broadcast, layers merged on the trainer ({mm['sync/broadcast_bytes'] / 2**20:.1f} MiB bf16): "
        f"{lo['merged_seconds']:.2f} s"
    )
    print(
        f"  broadcast, adapter only, merged by the worker ({a['sync/broadcast_bytes'] / 2**20:.2f} MiB fp32): "
        f"{lo['broadcast_seconds']:.2f} s"
    )
    print(
        f"  ratio adapter/merged: bytes {a['sync/broadcast_bytes'] / mm['sync/broadcast_bytes']:.3f}x, seconds "
        f"{lo['broadcast_seconds'] / lo['merged_seconds']:.2f}x; adapter/disk seconds "
        f"{lo['broadcast_seconds'] / lo['disk_seconds']:.2f}x; server answers identical (adapter, merged, disk): "
        f"{lo['broadcast'] == lo['merged'] == lo['disk']}; changed: {lo['broadcast'] != lo['before']}"
    )


if __name__ == "__main__":
    main()
