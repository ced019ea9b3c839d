"""Start-up of the embedded CPU vLLM server: eager (the profile's ``ENFORCE_EAGER``: no compile) against compiled with
a warm compile cache (``ENFORCE_EAGER=false``: the inductor cache) and vLLM's default AOT compile, measured in the
same run, with what each start buys: the speed of the calls after it.

    .venv/bin/python -m benchmarks.bench_server_start [--runs 2] [--modes aot,inductor,eager]

vLLM 0.32 turns AOT compile on by default (torch >= 2.10), but on CPU its saved artifact fails to load ("Compiling
model again due to a load failure"), so every start compiles the model again. The embedded profile sets
VLLM_USE_AOT_COMPILE=0 (``ServeConfig.env``), whose inductor caches load; by default it does not compile at all
(``--enforce-eager``), which also skips the warm-up forward pass. For each mode one start fills the cache,
then ``--runs`` starts are timed: seconds to /health, the engine's "Warming up" span from its log (the compile), and
once up, 128 greedy tokens on 1 stream and on 4, and an agent turn's prefill (a fresh prompt of ``--prompt-tokens``,
1 token out). Eager mode skips both the compile and the warm-up forward pass; its price is in the calls.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from benchmarks.bench_inference import generate, throughput
from qwen_swe.config import settings as config
from qwen_swe.inference.client import InferenceClient
from qwen_swe.inference.embedded_server import EMBEDDED_SERVED_NAME, embedded_serve_config
from qwen_swe.inference.server import VLLMServer

# name: (VLLM_USE_AOT_COMPILE, eager, what it is)
MODES = {
    "aot": ("1", False, "vLLM default (AOT compile)"),
    "inductor": ("0", False, "compiled, inductor cache (ENFORCE_EAGER=false)"),
    "eager": ("0", True, "embedded profile (eager: no compile, no warm-up)"),
}
WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches".split()
_STAMP = re.compile(r"(\d\d-\d\d \d\d:\d\d:\d\d) \[cpu_model_runner\.py:\d+\] Warming up (model for|done)")


class Start(NamedTuple):
    up: float  # seconds to /health
    warmup: float | None  # the compile's warm-up span from the log
    load_failed: bool  # the log reports a failed cache load
    decode: float  # seconds for 128 greedy tokens
    decode_4: float  # tokens per second over 4 streams of 128
    prefill: float  # seconds for a fresh prompt of --prompt-tokens, 1 token out


def warmup_seconds(log_text: str) -> float | None:
    """The span between the worker's "Warming up model for the compilation..." and "Warming up done." lines."""
    stamps = [datetime.strptime(m.group(1), "%m-%d %H:%M:%S") for m in _STAMP.finditer(log_text)]
    return (stamps[-1] - stamps[0]).total_seconds() if len(stamps) >= 2 else None


def prefill(client: InferenceClient, tokens: int, i: int) -> float:
    """Seconds for a prompt of about ``tokens`` tokens that shares no prefix with an earlier one, 1 token out."""
    prompt = f"Document {i} {time.time_ns()}. " + " ".join(WORDS[(i + j) % len(WORDS)] for j in range(tokens))
    t0 = time.perf_counter()
    client.post("/v1/completions", {"model": EMBEDDED_SERVED_NAME, "prompt": prompt, "max_tokens": 1})
    return time.perf_counter() - t0


def start_once(settings: config.Settings, log_dir: Path, eager: bool, prompt_tokens: int) -> Start:
    serve = dataclasses.replace(embedded_serve_config(settings), eager=eager)
    log = log_dir / "vllm.log"
    t0 = time.perf_counter()
    with VLLMServer(serve, log) as server:
        client = InferenceClient(server.start(1800.0), timeout=600.0)
        up = time.perf_counter() - t0
        t1 = time.perf_counter()
        generate(client, 128)
        decode = time.perf_counter() - t1
        decode_4 = throughput(client, 4, 128)
        prefill_s = statistics.median(prefill(client, prompt_tokens, i) for i in range(3))
    text = log.read_text(errors="replace")
    return Start(up, warmup_seconds(text), "due to a load failure" in text, decode, decode_4, prefill_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2, help="timed starts per mode, after one that fills the cache")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--prompt-tokens", type=int, default=3000, help="about this many tokens in a prefill's prompt")
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",")]
    if unknown := [m for m in modes if m not in MODES]:
        ap.error(f"--modes: unknown {', '.join(unknown)}; choose from {', '.join(MODES)}")
    settings = config.load_settings([])
    results: dict[str, list[Start]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-server-start-") as tmp:
        for mode in modes:
            aot, eager, name = MODES[mode]
            os.environ["VLLM_USE_AOT_COMPILE"] = aot
            start_once(settings, Path(tmp) / f"{mode}-fill", eager, args.prompt_tokens)
            runs = [
                start_once(settings, Path(tmp) / f"{mode}-{i}", eager, args.prompt_tokens) for i in range(args.runs)
            ]
            results[mode] = runs
            ups = [r.up for r in runs]
            warm = [r.warmup for r in runs if r.warmup is not None]
            print(
                f"{name}: to /health {statistics.median(ups):.1f} s median ({', '.join(f'{u:.1f}' for u in ups)}); "
                f"compile warm-up {statistics.median(warm) if warm else float('nan'):.0f} s; "
                f"cache load failed in {sum(r.load_failed for r in runs)} of {len(runs)}; "
                f"128 tokens {statistics.median(r.decode for r in runs):.2f} s; 4 streams "
                f"{statistics.median(r.decode_4 for r in runs):.1f} tok/s; prefill of {args.prompt_tokens} tokens "
                f"{statistics.median(r.prefill for r in runs):.2f} s",
                flush=True,
            )
    if "inductor" in results:
        ref = statistics.median(r.up for r in results["inductor"])
        for mode in results.keys() - {"inductor"}:
            up = statistics.median(r.up for r in results[mode])
            print(f"start, {MODES[mode][2]} / compiled with the inductor cache: {up / ref:.2f}x")


if __name__ == "__main__":
    main()
