import pytest

from durations import (
    format_clock, format_compact, format_decimal, format_iso, format_long, format_relative, format_row, format_table,
    format_words, largest_unit, split,
)


def test_split_all_units():
    assert split(93784) == [(1, "d"), (2, "h"), (3, "m"), (4, "s")]


def test_split_leaves_out_zeros():
    assert split(3605, "hms") == [(1, "h"), (5, "s")]


def test_largest_unit():
    assert largest_unit(5400) == "h"


def test_largest_unit_of_zero():
    assert largest_unit(0) == "s"


def test_compact():
    assert format_compact(5400) == "1h 30m"


def test_compact_negative():
    assert format_compact(-90) == "-1m 30s"


def test_compact_zero():
    assert format_compact(0) == "0s"


def test_compact_units_and_separator():
    assert format_compact(5415, "hm", "") == "1h30m"


def test_clock_exact_hour():
    assert format_clock(3600) == "01:00:00"


def test_clock_hours_minutes_seconds():
    assert format_clock(5415) == "01:30:15"


def test_clock_negative():
    assert format_clock(-45) == "-00:00:45"


def test_clock_without_seconds():
    assert format_clock(5459, show_seconds=False) == "01:30"


def test_words_fraction():
    assert format_words(5400) == "1.5 hours"


def test_words_singular():
    assert format_words(60) == "1 minute"


def test_words_in_given_unit():
    assert format_words(5400, "min") == "90 minutes"


def test_words_digits():
    assert format_words(100, "min", 2) == "1.67 minutes"


def test_decimal_hours():
    assert format_decimal(5400) == "1.50h"


def test_decimal_minutes_one_digit():
    assert format_decimal(100, "min", 1) == "1.7m"


def test_relative_future():
    assert format_relative(300) == "in 5 minutes"


def test_relative_past():
    assert format_relative(-5400) == "1.5 hours ago"


def test_iso_hours_and_minutes():
    assert format_iso(5400) == "PT1H30M"


def test_iso_one_day_one_hour():
    assert format_iso(90000) == "P1DT1H"


def test_iso_whole_days():
    assert format_iso(172800) == "P2D"


def test_iso_empty_is_pt0s():
    assert format_iso(0) == "PT0S"


def test_iso_negative():
    with pytest.raises(ValueError, match="cannot be negative: -5"):
        format_iso(-5)


def test_long():
    assert format_long(5415) == "1 hour, 30 minutes and 15 seconds"


def test_long_two_parts():
    assert format_long(86460) == "1 day and 1 minute"


def test_long_one_part():
    assert format_long(7200) == "2 hours"


def test_long_zero():
    assert format_long(0) == "0 seconds"


def test_row():
    assert format_row("coding", 5400) == "coding ................ 1h 30m"


def test_row_width():
    assert format_row("email", 45, 16) == "email ...... 45s"


def test_table():
    lines = format_table([("coding", 5400), ("email", 2700)], 20).splitlines()
    assert lines == ["coding ...... 1h 30m", "email .......... 45m", "-" * 20, "total ....... 2h 15m"]
