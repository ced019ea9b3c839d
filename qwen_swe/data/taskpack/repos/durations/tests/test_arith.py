import pytest

from durations import round_to, scale, seconds_of, total


def test_seconds_of_text():
    assert seconds_of("2m") == 120


def test_seconds_of_number():
    assert seconds_of(42) == 42


def test_total():
    assert total("1h", "30m", 90) == 5490


def test_seconds_of_rejects_other_types():
    with pytest.raises(TypeError, match="expected a duration as text or seconds, got float"):
        seconds_of(1.5)


def test_scale():
    assert scale("1h", 1.5) == 5400


def test_round_to_minutes():
    assert round_to(5429, "m") == 5400


def test_round_to_hours_from_text():
    assert round_to("1h31m", "h") == 7200


def test_round_to_half_goes_to_even():
    assert round_to(5430, "min") == 5400
