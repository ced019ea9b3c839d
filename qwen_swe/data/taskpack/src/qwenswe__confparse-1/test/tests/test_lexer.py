from confparse.lexer import split_assignment, strip_comment, unquote


def test_strip_hash_comment():
    assert strip_comment("port = 80  # web") == "port = 80"


def test_strip_semicolon_comment():
    assert strip_comment("; a comment line") == ""


def test_line_without_comment():
    assert strip_comment("name = demo   ") == "name = demo"


def test_comment_markers_inside_quotes_are_kept():
    assert strip_comment('accent = "#ff8800"') == 'accent = "#ff8800"'
    assert strip_comment("motto = 'a; b'  # note") == "motto = 'a; b'"


def test_comment_after_unquoted_value_with_quote_char():
    assert strip_comment("name = it's  ; comment") == "name = it's"


def test_unquote():
    assert unquote('"hello"') == "hello"
    assert unquote("'x'") == "x"
    assert unquote("\"mixed'") == "\"mixed'"


def test_split_assignment():
    assert split_assignment("key =  value ") == ("key", "value")
    assert split_assignment("no assignment here") is None
