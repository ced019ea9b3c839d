from urlkit import build_query, get_param, parse_pairs, parse_query, remove_param, set_param


def test_parse_pairs():
    assert parse_pairs("a=1&b=x+y&c") == [("a", "1"), ("b", "x y"), ("c", "")]


def test_parse_pairs_value_with_equals_sign():
    assert parse_pairs("?expr=a%3Db=c&&") == [("expr", "a=b=c")]


def test_parse_pairs_empty():
    assert parse_pairs("") == []


def test_parse_query_collects_repeated_names():
    assert parse_query("a=1&b=2&a=3") == {"a": ["1", "3"], "b": ["2"]}


def test_get_param():
    assert get_param("q=caf%C3%A9&page=2", "q") == "café"


def test_get_param_missing():
    assert get_param("q=x", "page", "1") == "1"


def test_build_query_from_dict():
    assert build_query({"q": "a b", "page": 2}) == "q=a+b&page=2"


def test_build_query_from_pairs_and_lists():
    assert build_query([("tag", ["x", "y&z"]), ("n", None)]) == "tag=x&tag=y%26z&n="


def test_build_query_value_types():
    assert build_query({"on": True, "off": False, "price": 3.0}) == "on=true&off=false&price=3"
    assert build_query({"price": 2.50}) == "price=2.5"


def test_set_param_replaces_value():
    assert set_param("/search?q=old&page=2#top", "q", "new one") == "/search?page=2&q=new+one#top"


def test_set_param_without_query():
    assert set_param("/search", "q", "x") == "/search?q=x"


def test_remove_param():
    assert remove_param("/s?a=1&b=2&a=3#f", "a") == "/s?b=2#f"


def test_remove_param_drops_empty_query():
    assert remove_param("/s?a=1", "a") == "/s"
