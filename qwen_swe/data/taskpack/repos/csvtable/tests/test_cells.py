import pytest

from csvtable import align_decimals, cell_text, fit, pad, side_of, truncate


def test_cell_text():
    assert cell_text("abc") == "abc"
    assert cell_text(42) == "42"
    assert cell_text(None) == ""


def test_cell_text_bools():
    assert cell_text(True) == "yes"
    assert cell_text(False) == "no"


def test_cell_text_floats():
    assert cell_text(3.14159) == "3.14"
    assert cell_text(2.5, 0) == "2"
    assert cell_text(1.0, 3) == "1.000"


def test_side_of():
    assert side_of("left") == "<"
    assert side_of(" Right ") == ">"
    assert side_of("CENTER") == "^"
    assert side_of("^") == "^"


def test_side_of_unknown():
    with pytest.raises(KeyError):
        side_of("middle")


def test_truncate():
    assert truncate("hello world", 8) == "hello..."
    assert truncate("hello", 5) == "hello"
    assert truncate("hi", 10) == "hi"


def test_truncate_narrow():
    assert truncate("hello", 2) == "he"
    assert truncate("hello", 3) == "..."
    assert truncate("hello", 0) == ""


def test_truncate_negative_width():
    with pytest.raises(ValueError, match="negative width: -1"):
        truncate("abc", -1)


def test_pad_left():
    assert pad("ab", 5) == "ab   "
    assert pad("ab", 2) == "ab"


def test_pad_right():
    assert pad("7", 4, "right") == "   7"
    assert pad("7", 4, ">", "0") == "0007"


def test_pad_center():
    assert pad("ab", 6, "center") == "  ab  "
    assert pad("ab", 7, "^", "*") == "**ab***"


def test_pad_too_wide():
    with pytest.raises(ValueError, match="'abc' is wider than 2"):
        pad("abc", 2)


def test_pad_bad_fill():
    with pytest.raises(ValueError, match="fill must be one character"):
        pad("abc", 5, "left", "--")


def test_fit():
    assert fit("abcdefgh", 6) == "abc..."
    assert fit("ab", 4, "right") == "  ab"
    assert fit("abcd", 4, "center") == "abcd"


def test_align_decimals():
    assert align_decimals(["1.5", "10.25", "3", "-0.125"]) == [" 1.5  ", "10.25 ", " 3    ", "-0.125"]


def test_align_decimals_whole_numbers():
    assert align_decimals(["7", "123"]) == ["  7", "123"]
