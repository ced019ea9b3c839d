"""``python -m qwen_swe.data.taskpack generate|build|check``: maintain, build and prove the local task pack."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from qwen_swe.data.taskpack import TASKS_JSONL
from qwen_swe.data.taskpack.check import check_all, format_report
from qwen_swe.data.taskpack.images import build_all
from qwen_swe.data.taskpack.source import generate, load_rows
from qwen_swe.errors import SandboxError, TaskPackError
from qwen_swe.sandbox.docker_host import ENGINE_ERRORS, docker_client


def _rows(only: Sequence[str] | None) -> list[dict]:
    rows = load_rows(TASKS_JSONL)
    if only:
        unknown = sorted(set(only) - {row["instance_id"] for row in rows})
        if unknown:
            raise TaskPackError(f"unknown instance id(s): {', '.join(unknown)}")
        rows = [row for row in rows if row["instance_id"] in only]
    return rows


def _client() -> Any:
    try:
        return docker_client(timeout=600)
    except SandboxError as exc:
        raise TaskPackError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qwen_swe.data.taskpack", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("generate", help="write tasks.jsonl from src/ and repos/")
    for name, text in (("build", "build (or reuse) the task images"), ("check", "prove every task in containers")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("instance_ids", nargs="*", help="only these tasks (default: all)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        if args.command == "generate":
            rows = generate(TASKS_JSONL)
            print(f"wrote {len(rows)} tasks to {TASKS_JSONL}")
        elif args.command == "build":
            build_all(_rows(args.instance_ids), _client())
        else:
            results = check_all(_rows(args.instance_ids))
            print(format_report(results))
            if any(not result.ok for result in results):
                return 1
    except TaskPackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ENGINE_ERRORS as exc:  # Docker/HTTP failures: one clear line instead of a traceback
        print(f"error: Docker failed during {args.command}: {exc}", file=sys.stderr)
        return 2
    print(f"{args.command}: done in {time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
