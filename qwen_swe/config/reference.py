"""The README's settings table, generated from the settings' own fields, so the two cannot disagree.

``python -m qwen_swe.config.reference`` prints the table; ``--write README.md`` replaces the block between the
README's markers with it. ``tests/unit/test_settings_reference.py`` fails when the README's block is stale.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from qwen_swe.config.fields import env_name
from qwen_swe.config.settings import EMBEDDED_PROFILE, all_fields

BEGIN, END = "<!-- settings:begin (python -m qwen_swe.config.reference --write README.md) -->", "<!-- settings:end -->"


def _cell(value: Any) -> str:
    if value is None or value == "":
        return ""
    text = str(value)
    tmp = tempfile.gettempdir()
    if text.startswith(tmp):  # a default made on this machine: written as where it is on any machine
        text = "$TMPDIR" + text[len(tmp):]
    return f"`{text}`"


def settings_table() -> str:
    """One row a setting: env var and flag, default, the embedded profile's value, help (with its choices)."""
    rows = ["| env var / flag | default | embedded default | meaning |", "| --- | --- | --- | --- |"]
    for f in all_fields():
        meaning = f.metadata["help"].replace("|", "\\|")
        if f.metadata.get("choices"):
            meaning += f" (one of: {', '.join(f.metadata['choices'])})"
        rows.append(f"| `{env_name(f.name)}` / `--{f.name.replace('_', '-')}` | {_cell(f.default)} | "
                    f"{_cell(EMBEDDED_PROFILE.get(f.name))} | {meaning} |")
    return "\n".join(rows) + "\n"


def block(text: str) -> tuple[int, int]:
    """The start and end offsets of the generated table between the markers in ``text``."""
    try:
        start = text.index(BEGIN) + len(BEGIN) + 1
        return start, text.index(END, start)
    except ValueError:
        raise ValueError(f"no settings block: the README needs the lines {BEGIN!r} and {END!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, help="replace the settings block of this file (the README)")
    args = parser.parse_args(argv)
    if not args.write:
        sys.stdout.write(settings_table())
        return 0
    text = args.write.read_text()
    start, end = block(text)
    args.write.write_text(text[:start] + settings_table() + text[end:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
