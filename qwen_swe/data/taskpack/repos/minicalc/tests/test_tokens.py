import pytest

from minicalc.tokens import CalcSyntaxError, tokenize


def kinds(expr):
    return [(t.kind, t.text) for t in tokenize(expr)]


def test_numbers_and_operators():
    assert kinds("1 + 22*3") == [("num", "1"), ("op", "+"), ("num", "22"), ("op", "*"), ("num", "3")]


def test_decimal_numbers():
    assert kinds("1.5 .25 3.") == [("num", "1.5"), ("num", ".25"), ("num", "3.")]


def test_floor_division_is_one_token():
    assert kinds("7 // 2") == [("num", "7"), ("op", "//"), ("num", "2")]


def test_parentheses():
    assert kinds("(1)") == [("lparen", "("), ("num", "1"), ("rparen", ")")]


def test_positions():
    assert [t.pos for t in tokenize(" 12 +  3")] == [1, 4, 7]


def test_unknown_character():
    with pytest.raises(CalcSyntaxError, match="'\\$' at position 2"):
        tokenize("1 $ 2")
