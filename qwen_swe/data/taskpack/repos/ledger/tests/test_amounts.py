import pytest

from ledger import parse_amount


def test_whole_amount():
    assert parse_amount("12") == 1200


def test_decimals():
    assert parse_amount("12.34") == 1234
    assert parse_amount("12.5") == 1250


def test_thousands_separator():
    assert parse_amount("1,234.56") == 123456


def test_negative_amount():
    assert parse_amount("-54.20") == -5420


def test_explicit_plus_sign():
    assert parse_amount("+3.10") == 310


def test_rejects_garbage():
    with pytest.raises(ValueError, match="not an amount"):
        parse_amount("12.345")
