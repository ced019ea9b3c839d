import pytest

from textkit import shorten, truncate


def test_short_text_is_unchanged():
    assert truncate("hello", 10) == "hello"


def test_long_text_ends_with_placeholder():
    assert truncate("The quick brown fox jumps", 12).endswith("...")


def test_cut_text_has_exactly_width_characters():
    assert truncate("The quick brown fox", 10) == "The qui..."
    assert len(truncate("abcdefghijklmnop", 6)) == 6


def test_custom_placeholder_counts_towards_width():
    assert truncate("abcdefghij", 5, placeholder="~") == "abcd~"


def test_text_of_exactly_width_is_unchanged():
    assert truncate("abcde", 5) == "abcde"


def test_width_smaller_than_placeholder():
    with pytest.raises(ValueError, match="smaller than the placeholder"):
        truncate("hello", 2)


def test_shorten_collapses_whitespace():
    assert shorten("  a   b\tc ", 20) == "a b c"


def test_shorten_keeps_whole_words():
    assert shorten("The quick brown fox", 15) == "The quick..."
