"""How much the data source costs next to the work it cannot avoid (parsing the JSON, copying the rows).

Run: .venv/bin/python -m benchmarks.bench_data_source [--data DIR] [--repeat N]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from qwen_swe.data.source import SWEBenchDataSource, load_instances
from qwen_swe.paths import REPO_ROOT


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=REPO_ROOT.parent / "shared" / "data" / "swebench")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    source = args.data / "lite_300.jsonl"
    if not source.is_file():
        sys.exit(f"no SWE-bench rows at {source}; pass --data DIR holding lite_300.jsonl")

    def raw_parse() -> list:
        return [json.loads(line) for line in source.read_text().splitlines() if line.strip()]

    rows = load_instances(source)
    t_ref = best_of(args.repeat, raw_parse)
    t_load = best_of(args.repeat, lambda: load_instances(source))

    with tempfile.TemporaryDirectory() as tmp:
        ns = SimpleNamespace(prompt_data=str(source), n_samples_per_prompt=2, save=tmp, load=tmp)
        ds = SWEBenchDataSource(ns)
        t_copy = best_of(args.repeat, lambda: [copy.deepcopy(r) for r in rows for _ in range(2)])
        t_groups = best_of(args.repeat, lambda: ds.get_samples(len(rows)))  # one epoch of groups
        t_save = best_of(args.repeat, lambda: ds.save(1))
        fresh = SWEBenchDataSource(ns)
        t_resume = best_of(args.repeat, lambda: fresh.load())

    flags = " ".join(sys.argv[1:] if argv is None else argv)
    print(f"command: .venv/bin/python -m benchmarks.bench_data_source {flags}".rstrip())
    print(f"rows: {len(rows)} ({source.stat().st_size / 1e6:.1f} MB), best of {args.repeat}")
    print(
        f"load_instances          {t_load * 1e3:8.1f} ms   reference json.loads of every line {t_ref * 1e3:8.1f} ms"
        f"   ratio {t_load / t_ref:.2f}x"
    )
    print(
        f"get_samples, one epoch  {t_groups * 1e3:8.1f} ms   reference deepcopy of every sample "
        f"{t_copy * 1e3:8.1f} ms   ratio {t_groups / t_copy:.2f}x   ({len(rows) / t_groups:,.0f} groups/s)"
    )
    print(f"save position           {t_save * 1e3:8.2f} ms   load position {t_resume * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()
