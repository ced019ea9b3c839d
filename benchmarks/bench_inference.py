"""Inference figures for the embedded model: weight-sync time and decode throughput, each against a reference
measured in the same run.

    .venv/bin/python -m benchmarks.bench_inference                       # starts the embedded CPU server
    .venv/bin/python -m benchmarks.bench_inference --url http://127.0.0.1:8011/v1
    .venv/bin/python -m benchmarks.bench_inference --reserved-cpus 0 --trainer-load   # vs the default 1

Weight sync = InferenceClient.reload_weights (pause, reload from a new folder, reset prefix cache, resume); the
reference is reading the same safetensors file's bytes in this process (page cache) (the floor for any disk-based
sync) and one 1-token request. Throughput: one stream vs 8 concurrent streams of 128 greedy tokens (ignore_eos).
``--trainer-load`` runs a 1-thread torch matmul loop beside the server (the trainer sharing the 2 cores), to
compare VLLM_CPU_NUM_OF_RESERVED_CPU=0 and 1 (the embedded default).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from qwen_swe import paths
from qwen_swe.config import settings as config
from qwen_swe.inference.client import InferenceClient
from qwen_swe.inference.embedded_server import EMBEDDED_SERVED_NAME, embedded_server

LOAD_SCRIPT = (
    "import torch, time\ntorch.set_num_threads(1)\na = torch.randn(512, 512)\nwhile True:\n    a = torch.tanh(a @ a)\n"
)


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def generate(client: InferenceClient, tokens: int, seed: int = 0) -> int:
    body = client.post(
        "/v1/completions",
        {
            "model": EMBEDDED_SERVED_NAME,
            "prompt": f"Story number {seed}:",
            "max_tokens": tokens,
            "temperature": 0.0,
            "ignore_eos": True,
        },
    )
    return int(body["usage"]["completion_tokens"])


def throughput(client: InferenceClient, streams: int, tokens: int) -> float:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        total = sum(pool.map(lambda i: generate(client, tokens, i), range(streams)))
    return total / (time.perf_counter() - t0)


@contextlib.contextmanager
def server(url: str | None, reserved_cpus: int) -> Iterator[str]:
    if url:
        yield url
        return
    with embedded_server(
        config.load_settings([], env={}),
        reserved_cpus=reserved_cpus,
        log_dir=Path(tempfile.gettempdir()) / "bench_inference",
    ) as started:
        yield started


@contextlib.contextmanager
def trainer_load(enabled: bool) -> Iterator[None]:
    if not enabled:
        yield
        return
    proc = subprocess.Popen([sys.executable, "-c", LOAD_SCRIPT], env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        time.sleep(2.0)
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="use a running embedded server instead of starting one")
    p.add_argument("--reserved-cpus", type=int, default=1, help="VLLM_CPU_NUM_OF_RESERVED_CPU of a started server")
    p.add_argument("--trainer-load", action="store_true", help="run a 1-core torch loop during the throughput runs")
    p.add_argument("--syncs", type=int, default=4)
    p.add_argument("--tokens", type=int, default=128)
    args = p.parse_args(argv)
    print("command:", " ".join([sys.executable, "-m", "benchmarks.bench_inference", *(argv or sys.argv[1:])]))

    original = paths.embedded_model_dir()
    with tempfile.TemporaryDirectory(prefix="bench_sync_") as tmp, server(args.url, args.reserved_cpus) as url:
        client = InferenceClient(url, timeout=600)
        # A new folder per sync, as the trainer writes them (vLLM may serve stale weights for a reused path).
        folders = []
        for i in range(args.syncs):
            folder = Path(tmp) / f"step_{i:06d}"
            folder.mkdir()
            for name in ("model.safetensors", "config.json"):
                shutil.copy(original / name, folder / name)
            folders.append(folder)
        size_mb = (original / "model.safetensors").stat().st_size / 1e6

        read = timed(lambda: (original / "model.safetensors").read_bytes(), 3)
        one_token = timed(lambda: generate(client, 1), 5)
        syncs = [timed(lambda f=f: client.reload_weights(f), 1)[0] for f in folders]
        client.reload_weights(original)
        generate(client, 8)  # warm
        with trainer_load(args.trainer_load):
            single = [throughput(client, 1, args.tokens) for _ in range(2)]
            multi = [throughput(client, 8, args.tokens) for _ in range(2)]

    sync, ref_read, ref_req = statistics.median(syncs), statistics.median(read), statistics.median(one_token)
    print(
        f"weight sync ({size_mb:.0f} MB fp32 safetensors, {len(syncs)} syncs): median {sync:.3f} s "
        f"(min {min(syncs):.3f}, max {max(syncs):.3f}); target <= 2 s: {'OK' if sync <= 2 else 'MISSED'}"
    )
    print(
        f"reference: read the same file from disk {ref_read:.3f} s -> sync/read = {sync / ref_read:.2f}x; "
        f"one 1-token request {ref_req * 1000:.0f} ms -> sync = {sync / ref_req:.1f} requests"
    )
    s1, s8 = max(single), max(multi)
    load = (
        f", trainer load on, reserved cpus {args.reserved_cpus}"
        if args.trainer_load
        else f", reserved cpus {args.reserved_cpus}"
    )
    print(
        f"decode ({args.tokens} greedy tokens per stream{load}): 1 stream {s1:.1f} tok/s, "
        f"8 streams {s8:.1f} tok/s aggregate -> 8-stream/single = {s8 / s1:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
