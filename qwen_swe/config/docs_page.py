"""A docs page whose block between two marker lines is generated from the code (the settings and CLI references),
so the page and the code cannot disagree: rendered the same on every machine, and rewritten in place by the
generator's ``--write``."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from qwen_swe.paths import REPO_ROOT


def portable(text: str) -> str:
    """A default made on this machine (under its temporary folder) written as it reads on any machine."""
    return text.replace(tempfile.gettempdir().rstrip("/") + "/", "$TMPDIR/")


def block(text: str, begin: str, end: str) -> tuple[int, int]:
    """The start and end offsets of the generated block between the markers in ``text``."""
    try:
        start = text.index(begin) + len(begin) + 1
        return start, text.index(end, start)
    except ValueError:
        raise ValueError(f"no generated block: the page needs the lines {begin!r} and {end!r}") from None


def write_block(path: Path, content: str, begin: str, end: str) -> None:
    """Replace the block between ``path``'s markers with ``content``; the rest of the page is left as written."""
    text = path.read_text()
    start, stop = block(text, begin, end)
    path.write_text(text[:start] + content + text[stop:])


def generator_main(
    argv: Sequence[str] | None, *, doc: str | None, page: Path, render: Callable[[], str], begin: str, end: str
) -> int:
    """A generator's command line: print the block, or with ``--write [PAGE]`` replace it on the page."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--write",
        type=Path,
        nargs="?",
        const=page,
        default=None,
        metavar="PAGE",
        help=f"replace the generated block of this page (default: {page.relative_to(REPO_ROOT)})",
    )
    args = parser.parse_args(argv)
    if not args.write:
        sys.stdout.write(render())
        return 0
    write_block(args.write, render(), begin, end)
    return 0
