"""The verdicts the project ships: every mutation of the shipped repositories, judged once, so a fresh set-up does
not judge them again (about 14 minutes on 2 cores).

A repository's verdicts are fixed by validate's key: its files, its mutations and test files, the interpreter,
pytest, swebench and the validator's code. The package carries one file a repository, ``verdicts/<repo>.json.gz``:
that key, the versions it was judged on, and the verdicts as validate caches them. When the generate command's
verdict cache (``QWEN_SWE_HOME/generated/verdicts``) has no entry under a repository's key, ``prime`` copies the
package's entry in if its key is the same; any other key (another Python build, a changed repository, mutation
operator or validator) is judged as before. ``--no-cache`` uses neither. Only the command primes: ``generate()``
and ``validate()`` called with a cache of their own judge what it lacks.

``python -m qwen_swe.data.generate.shipped`` lists the stale files and fails if there are any; ``--write`` judges
what the cache lacks (``validate`` with the cache: a run that just judged costs nothing) and rewrites them.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

from qwen_swe.data.generate.tasks import repo_mutations, shipped_repos
from qwen_swe.data.generate.validate import TIMED_OUT, cache_key, validate
from qwen_swe.errors import SETUP_EXIT_CODE, TaskPackError
from qwen_swe.paths import verdict_cache

SHIPPED_DIR = Path(__file__).resolve().parent / "verdicts"
REFRESH = ".venv/bin/python -m qwen_swe.data.generate.shipped --write"


def judged_on() -> dict[str, str]:
    """The versions in validate's key (the same three): a shipped key can only match where these are the same."""
    return {"python": sys.version, "pytest": metadata.version("pytest"), "swebench": metadata.version("swebench")}


def shipped_file(name: str, folder: Path | None = None) -> Path:
    return (folder or SHIPPED_DIR) / f"{name}.json.gz"


def read(name: str, folder: Path | None = None) -> dict[str, Any] | None:
    """The package's entry of repository ``name`` (key, judged_on, verdicts), or None if absent or unreadable."""
    try:
        entry = json.loads(gzip.decompress(shipped_file(name, folder).read_bytes()))
    except (OSError, ValueError, EOFError, zlib.error):
        return None  # absent or damaged: that repository is judged
    return entry if isinstance(entry, dict) and {"key", "judged_on", "verdicts"} <= entry.keys() else None


def encode(entry: dict[str, Any]) -> bytes:
    """Byte-for-byte the same for the same entry (sorted keys, no time stamp), so a refresh without a change is no
    change in git."""
    text = json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n"
    return gzip.compress(text.encode(), compresslevel=9, mtime=0)


def current_key(repo: Path) -> str:
    """The key the generator computes here for ``repo``'s verdicts (any seed, ``--localized`` or not)."""
    mutations, tests = repo_mutations(repo)
    return cache_key(repo, mutations, tests)


def prime(
    repos: Sequence[Path], cache: Path, log: Callable[[str], None] = print, folder: Path | None = None
) -> list[str]:
    """Copy into ``cache`` the package's verdicts of each repository whose key is the one computed here and which
    the cache lacks; the names copied."""
    copied = []
    for repo in repos:
        entry = read(repo.name, folder)
        if entry is None:
            continue
        key = current_key(repo)
        stored = cache / f"{repo.name}-{key}.json"
        if stored.is_file():
            continue
        if entry["key"] != key:
            why = (
                f"they were judged on Python {entry['judged_on'].get('python')}"
                if entry["judged_on"] != judged_on()
                else "the repository, its mutations or the validator changed since"
            )
            log(f"{repo.name}: the package's verdicts are of another key ({why}): judging")
            continue
        stored.parent.mkdir(parents=True, exist_ok=True)
        partial = stored.with_suffix(f".tmp{os.getpid()}")
        partial.write_text(json.dumps(entry["verdicts"]))
        partial.replace(stored)  # atomic, as validate writes its own entries
        log(f"{repo.name}: verdicts from the package (key {key})")
        copied.append(repo.name)
    return copied


def stale(repos: Sequence[Path], folder: Path | None = None) -> list[str]:
    """The repositories whose package file is missing or of another key than the one computed here."""
    return [r.name for r in repos if (entry := read(r.name, folder)) is None or entry["key"] != current_key(r)]


def write(
    repos: Sequence[Path],
    cache: Path,
    jobs: int = 2,
    log: Callable[[str], None] = print,
    folder: Path | None = None,
) -> list[str]:
    """Rewrite the package file of every stale repository from ``validate`` with ``cache`` (which judges what the
    cache lacks); the names written. A timed-out verdict may differ on an idle machine: it is never shipped."""
    written = []
    for repo in repos:
        if repo.name not in stale([repo], folder):
            continue
        mutations, tests = repo_mutations(repo)
        verdicts = validate(repo, mutations, tests, jobs=jobs, log=log, cache=cache)
        if any(v.reject == TIMED_OUT for v in verdicts):
            raise TaskPackError(f"{repo.name}: some tests timed out; write the verdicts on an idle machine")
        entry = {
            "repo": repo.name,
            "key": cache_key(repo, mutations, tests),
            "judged_on": judged_on(),
            "verdicts": [asdict(v) for v in verdicts],
        }
        path = shipped_file(repo.name, folder)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode(entry))
        log(f"{repo.name}: wrote {path} ({path.stat().st_size} bytes)")
        written.append(repo.name)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m qwen_swe.data.generate.shipped", description=__doc__)
    p.add_argument("--write", action="store_true", help="judge what the cache lacks and rewrite the stale files")
    p.add_argument("--jobs", type=int, default=2, help="pytest runs at a time")
    p.add_argument(
        "--new-python",
        action="store_true",
        help="write even where the files were judged on another interpreter (the project's Python changed)",
    )
    args = p.parse_args(argv)
    repos = shipped_repos()
    others = {str(e["judged_on"].get("python")) for r in repos if (e := read(r.name))} - {judged_on()["python"]}
    try:
        if args.write and others and not args.new_python:
            raise TaskPackError(
                f"the shipped verdicts were judged on Python {', '.join(sorted(others))}, this is {sys.version}: "
                "write them with the interpreter scripts/setup.sh installs (or --new-python if that changed)"
            )
        if args.write:
            written = write(repos, verdict_cache(), jobs=args.jobs)
            print(f"shipped verdicts: {len(written)} of {len(repos)} rewritten in {SHIPPED_DIR}")
            return 0
    except TaskPackError as exc:
        print(f"shipped verdicts: {exc}", file=sys.stderr)
        return SETUP_EXIT_CODE
    old = stale(repos)
    for repo in repos:
        print(f"{'stale' if repo.name in old else 'fresh'}  {repo.name}")
    if old:
        print(f"refresh them: {REFRESH}", file=sys.stderr)
    return 1 if old else 0


if __name__ == "__main__":
    sys.exit(main())
