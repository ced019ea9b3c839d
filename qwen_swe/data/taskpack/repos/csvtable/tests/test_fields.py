import pytest

from csvtable import check_delimiter, join_line, needs_quotes, quote, split_line, unquote


def test_check_delimiter():
    assert check_delimiter(";") == ";"


def test_check_delimiter_rejects_quote():
    with pytest.raises(ValueError, match="bad delimiter"):
        check_delimiter('"')


def test_check_delimiter_rejects_two_characters():
    with pytest.raises(ValueError, match="bad delimiter"):
        check_delimiter(", ")


def test_needs_quotes():
    assert needs_quotes("plain") is False
    assert needs_quotes("a,b") is True
    assert needs_quotes('say "hi"') is True
    assert needs_quotes(" padded") is True
    assert needs_quotes("two\nlines") is True


def test_needs_quotes_other_delimiter():
    assert needs_quotes("a,b", ";") is False
    assert needs_quotes("a;b", ";") is True


def test_quote():
    assert quote("plain text") == "plain text"
    assert quote("a,b") == '"a,b"'
    assert quote('say "hi"') == '"say ""hi"""'


def test_quote_tab_delimiter():
    assert quote("a\tb", "\t") == '"a\tb"'
    assert quote("a,b", "\t") == "a,b"


def test_unquote():
    assert unquote('"a,b"') == "a,b"
    assert unquote('  "say ""hi"""  ') == 'say "hi"'
    assert unquote('""') == ""


def test_unquote_plain_field():
    assert unquote("  plain ") == "plain"


def test_unquote_unterminated():
    with pytest.raises(ValueError, match="unterminated quote"):
        unquote('"abc')
    with pytest.raises(ValueError, match="unterminated quote"):
        unquote('"a""')


def test_split_line():
    assert split_line("a, b ,c") == ["a", "b", "c"]


def test_split_line_quoted_delimiters():
    assert split_line('"x,y",1,"a ""b"", c",') == ["x,y", "1", 'a "b", c', ""]


def test_split_line_semicolons():
    assert split_line('one;"two;three";four', ";") == ["one", "two;three", "four"]


def test_join_line():
    assert join_line(["a", "b,c", 'd"e', ""]) == 'a,"b,c","d""e",'


def test_join_line_pipe():
    assert join_line(["x|y", "z"], "|") == '"x|y"|z'


def test_split_line_round_trip():
    values = ["one", " two", "three, four", '"quoted"']
    assert split_line(join_line(values)) == ["one", " two", "three, four", '"quoted"']
