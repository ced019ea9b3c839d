import pytest

from urlkit import URLError, escape_byte, normalize_escapes, quote, quote_plus, unquote, unquote_plus


def test_escape_byte():
    assert escape_byte(254) == "%FE"
    assert escape_byte(32) == "%20"


def test_escape_byte_high_values():
    assert escape_byte(169) == "%A9"
    assert escape_byte(240) == "%F0"


def test_escape_byte_rejects_text():
    with pytest.raises(URLError, match="not a byte: 'a'"):
        escape_byte("a")


def test_quote_keeps_unreserved_and_slash():
    assert quote("/a-b_c.d~e/") == "/a-b_c.d~e/"


def test_quote_escapes_space_and_symbols():
    assert quote("a b&c=d") == "a%20b%26c%3Dd"


def test_quote_utf8():
    assert quote("café") == "caf%C3%A9"
    assert quote("😀") == "%F0%9F%98%80"


def test_quote_custom_safe():
    assert quote("a/b:c", safe=":") == "a%2Fb:c"


def test_quote_rejects_bytes():
    with pytest.raises(URLError, match="needs a str, not bytes"):
        quote(b"abc")


def test_quote_plus():
    assert quote_plus("a b/c+d") == "a+b%2Fc%2Bd"


def test_unquote():
    assert unquote("plain") == "plain"
    assert unquote("a%20b%2Fc") == "a b/c"


def test_unquote_utf8_and_lower_case_hex():
    assert unquote("caf%c3%a9%20ok") == "café ok"


def test_unquote_truncated_escape():
    with pytest.raises(URLError, match="truncated percent escape: %2"):
        unquote("abc%2")


def test_unquote_invalid_utf8_can_be_replaced():
    assert unquote("a%FFb", errors="replace") == "a\ufffdb"


def test_unquote_plus():
    assert unquote_plus("a+b%2Bc") == "a b+c"


def test_normalize_escapes():
    assert normalize_escapes("%7euser/%2f%41") == "~user/%2FA"
