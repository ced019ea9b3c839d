import pytest

from confparse import ConfigError, loads

SAMPLE = """
; global settings
name = demo          # trailing comments are allowed
[server]
port = 8080
debug = yes
hosts = a.example, b.example
greeting = "hello world"
"""


def test_global_keys():
    assert loads(SAMPLE).get("", "name") == "demo"


def test_sections_and_types():
    config = loads(SAMPLE)
    assert config.get_int("server", "port") == 8080
    assert config.get_bool("server", "debug") is True
    assert config.get_list("server", "hosts") == ["a.example", "b.example"]


def test_quoted_value():
    assert loads(SAMPLE).get("server", "greeting") == "hello world"


def test_value_with_equals_sign():
    config = loads("[db]\nurl = postgres://db.internal/app?sslmode=require\n")
    assert config.get("db", "url") == "postgres://db.internal/app?sslmode=require"


def test_missing_key():
    with pytest.raises(ConfigError, match=r"missing \[server\] timeout"):
        loads(SAMPLE).get_int("server", "timeout")


def test_bad_line_names_line_number():
    with pytest.raises(ConfigError, match="line 2: expected"):
        loads("[a]\njust words\n")


def test_bad_int_value():
    with pytest.raises(ConfigError, match="not an integer"):
        loads("[a]\nn = many\n").get_int("a", "n")
