"""The CLI reference page is every ``qwen-swe`` command's ``--help`` as the commands print it: a new or changed
command, flag or setting fails here until ``python -m qwen_swe.cli.reference --write`` is run."""

from __future__ import annotations

from qwen_swe.cli import reference
from qwen_swe.cli.commands import COMMANDS, command_help, settings_help
from qwen_swe.config.docs_page import block


def _words(text: str) -> list[str]:
    """argparse wraps the help to the width given and a default under $TMPDIR changes a line's length: the page is
    compared word by word, so every word of every help counts and the wrapping does not."""
    return text.split()


def test_the_page_is_the_generated_one():
    text = reference.PAGE.read_text()
    start, end = block(text, reference.BEGIN, reference.END)
    assert _words(text[start:end]) == _words(reference.page_block()), (
        "docs/reference/cli.md is stale: run python -m qwen_swe.cli.reference --write"
    )


def test_every_command_and_subcommand_has_its_section():
    page = reference.page_block()
    for name in COMMANDS:
        assert f"\n## qwen-swe {name}\n" in "\n" + page
    for sub in reference.SUBCOMMANDS["warmstart"]:
        assert f"\n## qwen-swe warmstart {sub}\n" in page
    assert page.count("\n## Run settings\n") == 1


def test_a_section_is_what_the_command_prints_for_help():
    """Each section is ``command_help``'s own text; only the shared settings list is printed once, at the end."""
    with reference.columns(reference.WIDTH):
        full, settings = command_help(COMMANDS["train"], []), settings_help()
        shown = reference.command_text("train", [])
    assert settings in full and settings not in shown
    assert shown.replace(reference.SETTINGS_NOTE, settings) == full
    with reference.columns(reference.WIDTH):
        assert reference.command_text("view", []) == command_help(COMMANDS["view"], [])


def test_a_changed_help_makes_the_page_stale(monkeypatch):
    text = reference.PAGE.read_text()
    start, end = block(text, reference.BEGIN, reference.END)
    monkeypatch.setattr(reference, "overview", lambda: "usage: qwen-swe, changed\n")
    assert _words(text[start:end]) != _words(reference.page_block())


def test_no_machine_path_on_the_page():
    text = reference.PAGE.read_text()
    assert "/tmp/" not in text and "/root" not in text and "$TMPDIR/qwen_swe_grpo" in text
