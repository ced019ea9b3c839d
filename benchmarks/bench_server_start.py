"""Start-up of the embedded CPU vLLM server with a warm compile cache: the profile's inductor cache against vLLM's
default AOT compile, measured in the same run.

    .venv/bin/python -m benchmarks.bench_server_start [--runs 2]

vLLM 0.32 turns AOT compile on by default (torch >= 2.10), but on CPU its saved artifact fails to load ("Compiling
model again due to a load failure"), so every start compiles the model again. The embedded profile sets
VLLM_USE_AOT_COMPILE=0 (``ServeConfig.env``), whose inductor caches load. For each mode one start fills the cache,
then ``--runs`` starts are timed: seconds to /health, the engine's "Warming up" span from its log (the compile), and
128 greedy tokens once up (the compiled model must decode as fast either way).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from benchmarks.bench_inference import generate
from qwen_swe.config import settings as config
from qwen_swe.inference.client import InferenceClient
from qwen_swe.inference.embedded_server import embedded_server

MODES = {"vLLM default (AOT compile)": "1", "embedded profile (inductor cache)": "0"}
_STAMP = re.compile(r"(\d\d-\d\d \d\d:\d\d:\d\d) \[cpu_model_runner\.py:\d+\] Warming up (model for|done)")


class Start(NamedTuple):
    up: float  # seconds to /health
    warmup: float | None  # the compile's warm-up span from the log
    load_failed: bool  # the log reports a failed cache load
    decode: float  # seconds for 128 greedy tokens


def warmup_seconds(log_text: str) -> float | None:
    """The span between the worker's "Warming up model for the compilation..." and "Warming up done." lines."""
    stamps = [datetime.strptime(m.group(1), "%m-%d %H:%M:%S") for m in _STAMP.finditer(log_text)]
    return (stamps[-1] - stamps[0]).total_seconds() if len(stamps) >= 2 else None


def start_once(settings: config.Settings, log_dir: Path) -> Start:
    t0 = time.perf_counter()
    with embedded_server(settings, log_dir=log_dir) as url:
        up = time.perf_counter() - t0
        t1 = time.perf_counter()
        generate(InferenceClient(url, timeout=120.0), 128)
        decode = time.perf_counter() - t1
    text = next(log_dir.glob("vllm-embedded-*.log")).read_text(errors="replace")
    return Start(up, warmup_seconds(text), "due to a load failure" in text, decode)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2, help="timed starts per mode, after one that fills the cache")
    args = ap.parse_args()
    settings = config.load_settings([])
    results: dict[str, list[Start]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-server-start-") as tmp:
        for name, value in MODES.items():
            os.environ["VLLM_USE_AOT_COMPILE"] = value
            start_once(settings, Path(tmp) / f"{value}-fill")
            results[name] = [start_once(settings, Path(tmp) / f"{value}-{i}") for i in range(args.runs)]
            runs = results[name]
            ups = [r.up for r in runs]
            warm = [r.warmup for r in runs if r.warmup is not None]
            print(
                f"{name}: to /health {statistics.median(ups):.1f} s median ({', '.join(f'{u:.1f}' for u in ups)}); "
                f"compile warm-up {statistics.median(warm) if warm else float('nan'):.0f} s; "
                f"cache load failed in {sum(r.load_failed for r in runs)} of {len(runs)}; "
                f"128 tokens {statistics.median(r.decode for r in runs):.2f} s"
            )
    ref, ours = (statistics.median(r.up for r in results[n]) for n in MODES)
    print(f"ratio (embedded profile / vLLM default): {ours / ref:.2f}x")


if __name__ == "__main__":
    main()
