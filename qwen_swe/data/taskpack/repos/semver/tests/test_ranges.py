import pytest

from semver import expand, expand_term, max_satisfying, parse, satisfies


def test_caret():
    assert expand_term("^1.2.3") == ">=1.2.3 <2.0.0"


def test_caret_partial():
    assert expand_term("^1.2") == ">=1.2.0 <2.0.0"


def test_caret_zero_major():
    assert expand_term("^0.2.3") == ">=0.2.3 <0.3.0"
    assert expand_term("^0.0") == ">=0.0.0 <0.1.0"


def test_caret_zero_minor():
    assert expand_term("^0.0.0") == ">=0.0.0 <0.0.1"
    assert expand_term("^0.0.3") == ">=0.0.3 <0.0.4"


def test_caret_major_only():
    assert expand_term("^0") == ">=0.0.0 <1.0.0"


def test_tilde():
    assert expand_term("~1.2.3") == ">=1.2.3 <1.3.0"
    assert expand_term("~1") == ">=1.0.0 <2.0.0"


def test_partial_version_is_a_range():
    assert expand_term("1.4") == ">=1.4.0 <1.5.0"


def test_comparison_terms():
    assert expand_term(">=1.2.0") == ">=1.2.0"
    assert expand_term("<2.0.0-rc.1") == "<2.0.0-rc.1"
    assert expand_term("v1.0.0") == "=1.0.0"


def test_invalid_term():
    with pytest.raises(ValueError, match="invalid range term: '>>1.0.0'"):
        expand_term(">>1.0.0")


def test_expand_several_terms():
    assert expand("^1.2 <1.5.0") == ">=1.2.0 <2.0.0 <1.5.0"


def test_expand_hyphen_range():
    assert expand("1.2.3 - 2.3.4") == ">=1.2.3 <=2.3.4"


def test_satisfies():
    assert satisfies("1.4.2", "^1.2")
    assert not satisfies("2.0.0", "^1.2")
    assert not satisfies("1.1.9", "^1.2")


def test_satisfies_hyphen_range_is_inclusive():
    assert satisfies("2.3.4", "1.2.3 - 2.3.4")
    assert not satisfies(parse("2.3.5"), "1.2.3 - 2.3.4")


def test_satisfies_exact():
    assert satisfies("1.0.0", "=1.0.0")
    assert not satisfies("1.0.1", "1.0.0")


def test_max_satisfying():
    versions = ["1.2.3", "1.9.0", "2.0.0", "1.10.1-rc.1", "0.9.0"]
    assert str(max_satisfying(versions, ">=1.2.0 <2.0.0")) == "1.10.1-rc.1"


def test_max_satisfying_none():
    assert max_satisfying(["1.0.0", "1.1.0"], "~2.0") is None
