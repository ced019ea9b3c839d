"""Task generation speed: every mutation of the shipped repositories validated with pytest, rows and commits written.

Reference measured in the same run: one pytest run of each clean repository's tests, times the number of mutations
tried there, divided by the parallel jobs: what the pytest runs alone cost. The ratio says what the generator adds
(mutating, parsing logs, statements, git commits). Images are not built here (their times are in
docs/results/performance.md).

    .venv/bin/python -m benchmarks.bench_generate [--seed 0] [--jobs 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from qwen_swe.data.generate.mutations import mutations_of
from qwen_swe.data.generate.tasks import generate, repo_files, shipped_repos
from qwen_swe.data.generate.validate import run_tests
from qwen_swe.data.taskpack.repo import copy_files


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    repos = shipped_repos()
    reference, tried = 0.0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for folder in repos:
            sources, tests = repo_files(folder)
            count = sum(len(mutations_of((folder / f).read_text(), f)) for f in sources)
            copy = Path(tmp) / folder.name
            copy_files(folder, copy)
            t = time.monotonic()
            run_tests(copy, tests)
            reference += (time.monotonic() - t) * count / args.jobs
            tried += count
        t = time.monotonic()
        gen = generate(repos, args.seed, 10_000, 0.25, Path(tmp) / "work", jobs=args.jobs, log=lambda _: None)
        wall = time.monotonic() - t
    held = sum(t.split == "heldout" for t in gen.tasks)
    print(f"command: python -m benchmarks.bench_generate --seed {args.seed} --jobs {args.jobs}")
    print(
        f"{len(gen.tasks)} valid tasks ({len(gen.tasks) - held} train, {held} held-out) of {tried} mutations "
        f"from {len(repos)} repositories in {wall:.1f} s ({len(gen.tasks) / wall:.1f} tasks/s); rejected {gen.rejects}"
    )
    print(f"reference: the pytest runs alone {reference:.1f} s; ratio generate / reference = {wall / reference:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
