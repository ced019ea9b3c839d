from textkit import case


def test_snake_to_camel():
    assert case.snake_to_camel("parse_http_header") == "parseHttpHeader"


def test_snake_to_camel_upper_first():
    assert case.snake_to_camel("parse_http_header", upper_first=True) == "ParseHttpHeader"


def test_snake_to_camel_keeps_leading_underscore():
    assert case.snake_to_camel("_private_name") == "_privateName"


def test_snake_to_camel_single_word():
    assert case.snake_to_camel("name") == "name"
