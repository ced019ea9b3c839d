import pytest

from durations import convert, size_of, unit_name, unit_of


def test_unit_of_short_name():
    assert unit_of("h") == "h"


def test_unit_of_long_name_with_case_and_spaces():
    assert unit_of(" Minutes ") == "m"


def test_unit_of_unknown():
    with pytest.raises(ValueError, match="unknown unit 'fortnight', expected one of: w, wk, wks, week"):
        unit_of("fortnight")


def test_size_of_units():
    assert [size_of(u) for u in ("s", "min", "hour", "days", "wk")] == [1, 60, 3600, 86400, 604800]


def test_unit_name_singular():
    assert unit_name("hrs", 1) == "hour"


def test_unit_name_plural():
    assert unit_name("d", 3) == "days"


def test_convert_minutes_to_hours():
    assert convert(90, "min", "h") == 1.5


def test_convert_days_to_seconds():
    assert convert(2, "days", "s") == 172800
