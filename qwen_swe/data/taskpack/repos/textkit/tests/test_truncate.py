import pytest

from textkit import shorten, truncate


def test_short_text_is_unchanged():
    assert truncate("hello", 10) == "hello"


def test_long_text_ends_with_placeholder():
    assert truncate("The quick brown fox jumps", 12).endswith("...")


def test_width_smaller_than_placeholder():
    with pytest.raises(ValueError, match="smaller than the placeholder"):
        truncate("hello", 2)


def test_shorten_collapses_whitespace():
    assert shorten("  a   b\tc ", 20) == "a b c"


def test_shorten_keeps_whole_words():
    assert shorten("The quick brown fox", 15) == "The quick..."
