"""``python -m qwen_swe.data.generate``: bug-injection tasks from repositories whose tests pass.

Writes ``OUT/train.jsonl`` and ``OUT/heldout.jsonl`` (SWE-bench rows; no held-out bug site is in train),
``OUT/report.json``, and one image per repository (``qwen-swe/gen.<repo>:<content hash>``, reused while the
tasks are the same). ``--check N`` also proves N tasks of each split through the grader in containers:
FAIL_TO_PASS fails at base_commit, everything passes with the gold patch, the empty patch is not resolved.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qwen_swe.data.generate.shipped import prime
from qwen_swe.data.generate.tasks import Generation, generate, scratch, shipped_repos
from qwen_swe.data.taskpack.check import check_all, format_report
from qwen_swe.data.taskpack.images import ensure_base, ensure_python, ensure_testbed_image
from qwen_swe.data.taskpack.repo import tree_files
from qwen_swe.data.taskpack.source import render
from qwen_swe.errors import SETUP_EXIT_CODE, SandboxError, TaskPackError
from qwen_swe.paths import PACKAGE_DIR, generated_dir, verdict_cache
from qwen_swe.progress import Meter, show
from qwen_swe.sandbox.docker_host import docker_client


def inputs_digest(repos: Sequence[Path], seed: int, count: int, heldout: float, localized: bool = False) -> str:
    """What decides the output: the arguments, the repositories' files and the generator's own code."""
    h = hashlib.sha256(json.dumps([seed, count, heldout, localized]).encode())
    sources = sorted((PACKAGE_DIR / "data" / "generate").glob("*.py"))
    for path in sources + sorted(f for r in repos for f in tree_files(Path(r))):
        h.update(str(path.name).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def reusable(out: Path, digest: str) -> bool:
    """An earlier run with the same inputs wrote ``out`` and its images still exist."""
    try:
        report = json.loads((out / "report.json").read_text())
    except (OSError, ValueError):
        return False
    if report.get("inputs") != digest or not all((out / f"{s}.jsonl").is_file() for s in ("train", "heldout")):
        return False
    try:
        client = docker_client(timeout=60)
    except SandboxError as exc:
        raise TaskPackError(str(exc)) from None
    return all(client.images.list(name=tag) for tag in report.get("images", {}).values())


def write(gen: Generation, out: Path, meta: dict[str, Any]) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "heldout"):
        (out / f"{split}.jsonl").write_text(render([t.row for t in gen.tasks if t.split == split]))
    kinds: dict[str, int] = {}
    for task in gen.tasks:
        kinds[task.mutation.kind] = kinds.get(task.mutation.kind, 0) + 1
    report = {
        **meta,
        "tasks": len(gen.tasks),
        "train": sum(t.split == "train" for t in gen.tasks),
        "heldout": sum(t.split == "heldout" for t in gen.tasks),
        "kinds": kinds,
        "rejected": gen.rejects,
        "images": gen.images,
        "heldout_sites": sorted({t.row["bug_site"] for t in gen.tasks if t.split == "heldout"}),
    }
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def build_images(gen: Generation) -> None:
    try:
        client = docker_client(timeout=600)
    except SandboxError as exc:
        raise TaskPackError(str(exc)) from None
    for step in [*ensure_base(client), ensure_python(client)]:
        print(f"{step.action:>7}  {step.seconds:6.1f} s  {step.image}")
    meter = Meter(total=len(gen.testbeds))
    with show(meter, "generate: task images", unit="images"):
        for name, folder in sorted(gen.testbeds.items()):
            step = ensure_testbed_image(client, gen.images[name], folder)
            meter.advance(**{step.action: 1})
            print(f"{step.action:>7}  {step.seconds:6.1f} s  {step.image}")


def parser() -> argparse.ArgumentParser:
    """The generator's flags (``qwen-swe generate --help`` shows them with their defaults)."""
    p = argparse.ArgumentParser(
        prog="python -m qwen_swe.data.generate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--seed", type=int, default=0, help="decides which tasks and which held-out sites")
    p.add_argument("--count", type=int, default=1000, help="at most this many tasks in all")
    p.add_argument("--heldout", type=float, default=0.25, help="fraction of bug sites held out")
    p.add_argument(
        "--localized",
        action="store_true",
        help="keep only bugs whose failure's traceback passes through the faulty line",
    )
    p.add_argument(
        "--repo",
        action="append",
        type=Path,
        default=None,
        help="a local Python repository whose tests pass (repeatable; default: the shipped ones)",
    )
    p.add_argument("--out", type=Path, default=None, help="output folder (default QWEN_SWE_HOME/generated/...)")
    p.add_argument("--jobs", type=int, default=2, help="pytest runs at a time")
    p.add_argument("--no-build", action="store_true", help="write the rows only; build no image")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="do nothing when OUT holds the tasks of the same inputs and their images exist",
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="judge every mutation again (default: reuse the verdicts of the same repository files, "
        "mutations, interpreter and code from QWEN_SWE_HOME/generated/verdicts)",
    )
    p.add_argument(
        "--check",
        type=int,
        default=0,
        metavar="N",
        help="prove N tasks of each split through the grader (needs the images)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args_parser = parser()
    args = args_parser.parse_args(argv)
    if args.count < 1:
        args_parser.error("--count must be at least 1")
    out = args.out or generated_dir(args.seed, args.count, args.localized)
    repos = args.repo or shipped_repos()
    digest = inputs_digest(repos, args.seed, args.count, args.heldout, args.localized)
    print(
        f"generate: seed {args.seed}, count {args.count}, held-out fraction {args.heldout}"
        f"{', localized' if args.localized else ''}, {len(repos)} repositories -> {out}"
    )
    start = time.monotonic()
    try:
        if args.reuse and not args.check and reusable(out, digest):
            print(f"generate: reused {out} (same inputs {digest}, images present)")
            return 0
        cache = None if args.no_cache else verdict_cache()
        if cache is not None:
            prime(repos, cache)  # the package's verdicts of the same key: a fresh set-up judges nothing it ships
        with scratch() as tmp:
            gen = generate(
                repos,
                args.seed,
                args.count,
                args.heldout,
                Path(tmp),
                jobs=args.jobs,
                localized=args.localized,
                cache=cache,
            )
            generated = time.monotonic() - start
            if not args.no_build:
                build_images(gen)
        built = time.monotonic() - start - generated
        report = write(
            gen,
            out,
            {
                "seed": args.seed,
                "count": args.count,
                "heldout_fraction": args.heldout,
                "localized": args.localized,
                "repos": [str(r) for r in repos],
                "inputs": digest,
                "generate_seconds": round(generated, 1),
                "build_seconds": round(built, 1),
            },
        )
        print(
            f"{report['tasks']} tasks ({report['train']} train, {report['heldout']} held-out over "
            f"{len(report['heldout_sites'])} sites) in {generated:.1f} s, images in {built:.1f} s; "
            f"rejected {report['rejected']}"
        )
        if args.check:
            rng = random.Random(f"check-{args.seed}")
            rows = [
                row
                for split in ("train", "heldout")
                for row in rng.sample(
                    [t.row for t in gen.tasks if t.split == split],
                    min(args.check, sum(t.split == split for t in gen.tasks)),
                )
            ]
            results = check_all(rows, jobs=args.jobs)
            print(format_report(results))
            if not all(r.ok for r in results):
                return 1
    except TaskPackError as exc:
        print(f"generate: {exc}", file=sys.stderr)
        return SETUP_EXIT_CODE
    return 0


if __name__ == "__main__":
    sys.exit(main())
