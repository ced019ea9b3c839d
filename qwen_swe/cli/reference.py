"""The CLI reference page: every ``qwen-swe`` command's ``--help``, rendered from the commands themselves.

``python -m qwen_swe.cli.reference`` prints the page's generated block; ``--write`` replaces the block between
the markers of ``docs/reference/cli.md`` (or of the file given). ``tests/unit/test_cli_reference.py`` fails when
the page is stale. The run settings that ``train``, ``eval``, ``plan`` and ``warmstart collect`` list after their
own flags are the same list each time, so the page shows it once, at the end.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

from qwen_swe.cli.commands import COMMANDS, command_help, settings_help
from qwen_swe.cli.main import overview
from qwen_swe.config.docs_page import generator_main, portable
from qwen_swe.paths import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "reference" / "cli.md"
BEGIN = "<!-- cli:begin (python -m qwen_swe.cli.reference --write) -->"
END = "<!-- cli:end -->"
WIDTH = 100  # argparse wraps to the terminal; the page is rendered at one width on every machine
SUBCOMMANDS = {"warmstart": ("collect", "build")}  # a command whose subcommands have a help of their own
SETTINGS_NOTE = "(then every run setting: the list under Run settings, at the end of this page)\n"


@contextlib.contextmanager
def columns(width: int) -> Iterator[None]:
    """argparse reads the width from ``COLUMNS``; set it for the rendering only."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def command_text(name: str, argv: list[str]) -> str:
    """What ``qwen-swe NAME ARGV --help`` prints, with the shared settings list replaced by a pointer to it."""
    text = command_help(COMMANDS[name], argv)
    settings = settings_help()
    return text.replace(settings, SETTINGS_NOTE) if settings in text else text


def _fence(text: str) -> str:
    return "```text\n" + portable(text).rstrip("\n") + "\n```\n"


def page_block() -> str:
    """The generated part of the page: the overview, each command's help, then the run settings once."""
    with columns(WIDTH):
        parts = ["## qwen-swe\n\n" + _fence(overview())]
        for name in COMMANDS:
            for sub in ("", *SUBCOMMANDS.get(name, ())):
                title, argv = f"{name} {sub}".strip(), [sub] if sub else []
                parts.append(f"## qwen-swe {title}\n\n" + _fence(command_text(name, argv)))
        parts.append("## Run settings\n\n" + _fence(settings_help()))
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    return generator_main(argv, doc=__doc__, page=PAGE, render=page_block, begin=BEGIN, end=END)


if __name__ == "__main__":
    raise SystemExit(main())
