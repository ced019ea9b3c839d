from textkit import case


def test_snake_to_camel():
    assert case.snake_to_camel("parse_http_header") == "parseHttpHeader"


def test_snake_to_camel_upper_first():
    assert case.snake_to_camel("parse_http_header", upper_first=True) == "ParseHttpHeader"


def test_snake_to_camel_keeps_leading_underscore():
    assert case.snake_to_camel("_private_name") == "_privateName"


def test_snake_to_camel_single_word():
    assert case.snake_to_camel("name") == "name"


def test_camel_to_snake():
    assert case.camel_to_snake("parseHttpHeader") == "parse_http_header"
    assert case.camel_to_snake("ParseHttpHeader") == "parse_http_header"


def test_camel_to_snake_acronyms():
    assert case.camel_to_snake("HTTPResponseCode") == "http_response_code"
    assert case.camel_to_snake("getURL") == "get_url"


def test_camel_to_snake_digits():
    assert case.camel_to_snake("version2Name") == "version2_name"


def test_camel_to_snake_leaves_snake_case_alone():
    assert case.camel_to_snake("already_snake") == "already_snake"


def test_camel_to_snake_is_exported():
    import textkit

    assert textkit.camel_to_snake("someValue") == "some_value"


def test_round_trip():
    for name in ["parse_http_header", "value", "user_id"]:
        assert case.camel_to_snake(case.snake_to_camel(name)) == name
