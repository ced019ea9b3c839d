"""The settings reference page, generated from the settings' own fields, so the page and the code cannot disagree.

``python -m qwen_swe.config.reference`` prints the table; ``--write`` replaces the block between the markers of
``docs/reference/settings.md`` (or of the file given) with it. ``tests/unit/test_settings_reference.py`` fails when
the page's block is stale. ``qwen_swe/cli/reference.py`` renders the CLI page the same way (``docs_page.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qwen_swe.config.docs_page import generator_main, portable
from qwen_swe.config.fields import env_name
from qwen_swe.config.hardware import PROFILE_SHOWN
from qwen_swe.config.profile import EMBEDDED_PROFILE
from qwen_swe.config.settings import all_fields
from qwen_swe.paths import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "reference" / "settings.md"
BEGIN = "<!-- settings:begin (python -m qwen_swe.config.reference --write) -->"
END = "<!-- settings:end -->"


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
            f"{_cell(PROFILE_SHOWN.get(f.name, EMBEDDED_PROFILE.get(f.name)))} | {meaning} |"
        )
    return "\n".join(rows) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    return generator_main(argv, doc=__doc__, page=PAGE, render=settings_table, begin=BEGIN, end=END)


if __name__ == "__main__":
    raise SystemExit(main())
