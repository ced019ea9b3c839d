import pytest

from durations import parse, parse_clock, parse_entries, parse_iso, parse_span, parse_units


def test_units_compact():
    assert parse_units("1h30m15s") == 5415


def test_units_words():
    assert parse_units("90 minutes") == 5400


def test_units_list_with_commas_and_and():
    assert parse_units("2 days, 3 hours and 4.5 minutes") == 183870


def test_units_upper_case_and_spaces():
    assert parse_units(" 1H 30M ") == 5400


def test_units_fraction_rounds():
    assert parse_units("0.1 sec") == 0


def test_units_rejects_bare_number():
    with pytest.raises(ValueError, match="expected numbers with units, got '90'"):
        parse_units("90")


def test_units_rejects_unknown_unit():
    with pytest.raises(ValueError, match="unknown unit 'parsecs'"):
        parse_units("12 parsecs")


def test_units_rejects_repeated_unit():
    with pytest.raises(ValueError, match="unit 'h' given twice in '1 hour 2h'"):
        parse_units("1 hour 2h")


def test_clock_hours_and_minutes():
    assert parse_clock("1:30") == 5400


def test_clock_with_seconds():
    assert parse_clock(" 01:02:03 ") == 3723


def test_clock_rejects_minutes_over_59():
    with pytest.raises(ValueError, match="expected a clock time"):
        parse_clock("1:75")


def test_span():
    assert parse_span(" 9:00 - 17:30 ") == 30600


def test_span_past_midnight():
    assert parse_span("22:00-1:30:15") == 12615


def test_span_rejects_single_time():
    with pytest.raises(ValueError, match="expected a range of clock times"):
        parse_span("9:00")


def test_iso_hours_and_minutes():
    assert parse_iso("PT1H30M") == 5400


def test_iso_days_and_hours():
    assert parse_iso("P2DT3H") == 183600


def test_iso_lower_case():
    assert parse_iso(" pt45s ") == 45


def test_iso_rejects_empty_time():
    with pytest.raises(ValueError, match="expected an ISO 8601 duration"):
        parse_iso("PT")


def test_parse_plain_seconds():
    assert parse(" 5400 ") == 5400


def test_parse_negative():
    assert parse("-1h") == -3600


def test_parse_dispatches_iso():
    assert parse("P1D") == 86400


def test_parse_dispatches_lower_case_iso():
    assert parse("pt2m") == 120


def test_parse_dispatches_clock():
    assert parse("0:45") == 2700


def test_parse_dispatches_units():
    assert parse("1.5 hours") == 5400


def test_entries():
    text = "\ncoding: 1h30m\nmeeting: 0:45\nemail : 90 minutes\n"
    assert parse_entries(text) == [("coding", 5400), ("meeting", 2700), ("email", 5400)]


def test_entries_need_a_colon():
    with pytest.raises(ValueError, match="expected a line such as 'coding: 1h30m', got 'lunch 1h'"):
        parse_entries("coding: 1h\nlunch 1h")
