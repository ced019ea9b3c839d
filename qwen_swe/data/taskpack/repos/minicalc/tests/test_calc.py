import pytest

from minicalc import CalcSyntaxError, evaluate


def test_addition_and_multiplication():
    assert evaluate("1 + 2 * 3") == 7


def test_parentheses():
    assert evaluate("(1 + 2) * 3") == 9


def test_subtraction_is_left_associative():
    assert evaluate("10 - 4 - 3") == 3


def test_division_chain_is_left_associative():
    assert evaluate("100 / 10 / 5") == 2


def test_exact_division():
    assert evaluate("8 / 2") == 4


def test_floor_division():
    assert evaluate("7 // 2") == 3


def test_modulo():
    assert evaluate("17 % 5") == 2


def test_power():
    assert evaluate("2 ^ 10") == 1024


def test_unary_minus():
    assert evaluate("-3 + 5") == 2
    assert evaluate("-(2 + 3)") == -5


def test_float_literals():
    assert evaluate("1.5 * 2") == 3.0


@pytest.mark.parametrize(
    "expr",
    ["", "1 +", "(1 + 2", "1 2", ")"],
    ids=["empty", "dangling-operator", "unclosed-paren", "missing-operator", "stray-paren"],
)
def test_syntax_errors(expr):
    with pytest.raises(CalcSyntaxError):
        evaluate(expr)
