"""The settings reference page's table is the one the settings' fields generate: a new or changed setting, default,
embedded value or help fails here until ``python -m qwen_swe.config.reference --write`` is run."""

from __future__ import annotations

import pytest

from qwen_swe.config import reference
from qwen_swe.config.docs_page import block
from qwen_swe.config.fields import env_name
from qwen_swe.config.profile import EMBEDDED_PROFILE
from qwen_swe.config.settings import all_fields


def test_the_pages_table_is_the_generated_one():
    text = reference.PAGE.read_text()
    start, end = block(text, reference.BEGIN, reference.END)
    assert text[start:end] == reference.settings_table(), (
        "docs/reference/settings.md's table is stale: run python -m qwen_swe.config.reference --write"
    )


def test_a_changed_setting_makes_the_page_stale(monkeypatch):
    """The check above compares the page with the code: change one embedded value and they no longer match."""
    text = reference.PAGE.read_text()
    start, end = block(text, reference.BEGIN, reference.END)
    monkeypatch.setitem(EMBEDDED_PROFILE, "n_samples", EMBEDDED_PROFILE["n_samples"] + 1)
    assert text[start:end] != reference.settings_table()


def test_every_setting_has_a_row_with_its_embedded_value():
    rows = {line.split("`")[1]: line for line in reference.settings_table().splitlines()[2:]}
    assert list(rows) == [env_name(f.name) for f in all_fields()]
    assert "`4` |" in rows["N_SAMPLES"] and EMBEDDED_PROFILE["n_samples"] == 4
    assert "$TMPDIR" in rows["OUTPUT_DIR"] and "/tmp/" not in rows["OUTPUT_DIR"]  # no machine's own path


def test_a_page_without_the_markers_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="settings:begin"):
        block("# a page with no block\n", reference.BEGIN, reference.END)
    stale = tmp_path / "settings.md"
    stale.write_text(f"intro\n{reference.BEGIN}\n| old |\n{reference.END}\nafter\n")
    assert reference.main(["--write", str(stale)]) == 0
    assert stale.read_text() == f"intro\n{reference.BEGIN}\n{reference.settings_table()}{reference.END}\nafter\n"
