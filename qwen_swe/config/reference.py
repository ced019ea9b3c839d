"""The settings reference page, generated from the settings' own fields, so the page and the code cannot disagree.

``python -m qwen_swe.config.reference`` prints the table; ``--write`` replaces the block between the markers of
``docs/reference/settings.md`` (or of the file given) with it. ``tests/unit/test_settings_reference.py`` fails when
the page's block is stale. ``qwen_swe/cli/reference.py`` renders the CLI page by the same markers.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qwen_swe.config.fields import env_name
from qwen_swe.config.settings import EMBEDDED_PROFILE, all_fields
from qwen_swe.paths import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "reference" / "settings.md"
BEGIN = "<!-- settings:begin (python -m qwen_swe.config.reference --write) -->"
END = "<!-- settings:end -->"


def portable(text: str) -> str:
    """A default made on this machine (under its temporary folder) written as it reads on any machine."""
    return text.replace(tempfile.gettempdir().rstrip("/") + "/", "$TMPDIR/")


def _cell(value: Any) -> str:
    if value is None or value == "":
        return ""
    return f"`{portable(str(value))}`"


def settings_table() -> str:
    """One row a setting: env var and flag, default, the embedded profile's value, help (with its choices)."""
    rows = ["| env var / flag | default | embedded default | meaning |", "| --- | --- | --- | --- |"]
    for f in all_fields():
        meaning = f.metadata["help"].replace("|", "\\|")
        if f.metadata.get("choices"):
            meaning += f" (one of: {', '.join(f.metadata['choices'])})"
        rows.append(
            f"| `{env_name(f.name)}` / `--{f.name.replace('_', '-')}` | {_cell(f.default)} | "
            f"{_cell(EMBEDDED_PROFILE.get(f.name))} | {meaning} |"
        )
    return "\n".join(rows) + "\n"


def block(text: str, begin: str = BEGIN, end: str = END) -> tuple[int, int]:
    """The start and end offsets of the generated block between the markers in ``text``."""
    try:
        start = text.index(begin) + len(begin) + 1
        return start, text.index(end, start)
    except ValueError:
        raise ValueError(f"no generated block: the page needs the lines {begin!r} and {end!r}") from None


def write_block(path: Path, content: str, begin: str = BEGIN, end: str = END) -> None:
    """Replace the block between ``path``'s markers with ``content``; the rest of the page is left as written."""
    text = path.read_text()
    start, stop = block(text, begin, end)
    path.write_text(text[:start] + content + text[stop:])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--write",
        type=Path,
        nargs="?",
        const=PAGE,
        default=None,
        metavar="PAGE",
        help=f"replace the settings block of this page (default: {PAGE.relative_to(REPO_ROOT)})",
    )
    args = parser.parse_args(argv)
    if not args.write:
        sys.stdout.write(settings_table())
        return 0
    write_block(args.write, settings_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
