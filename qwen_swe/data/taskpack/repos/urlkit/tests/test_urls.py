import pytest

from urlkit import URL, URLError, join_host_port, normalize_url, origin, parse_port, redact_password
from urlkit import remove_dot_segments, resolve, split_host_port, split_url, unsplit_url


def test_split_url():
    assert split_url("HTTPS://Example.com:8443/a/b?x=1&y=2#top") == URL(
        "https", "example.com", 8443, "/a/b", "x=1&y=2", "top")


def test_split_url_without_authority():
    assert split_url("mailto:bob@example.com?subject=hi") == URL(
        "mailto", "", None, "bob@example.com", "subject=hi", "")


def test_split_url_host_only():
    assert split_url("http://example.com") == URL("http", "example.com", None, "", "", "")


def test_split_url_rejects_relative():
    with pytest.raises(URLError, match="not an absolute URL: '/a/b'"):
        split_url("/a/b")


def test_split_host_port():
    assert split_host_port("bob:pw@Example.COM:8080") == ("example.com", 8080)


def test_split_host_port_ipv6():
    assert split_host_port("[::1]:9000") == ("::1", 9000)
    assert split_host_port("[FE80::1]") == ("fe80::1", None)


def test_split_host_port_unclosed_bracket():
    with pytest.raises(URLError, match="unclosed bracket"):
        split_host_port("[::1")


def test_split_host_port_junk_after_ipv6():
    with pytest.raises(URLError, match="junk after the IPv6 address"):
        split_host_port("[::1]x")


def test_parse_port():
    assert parse_port("65535") == 65535
    assert parse_port("") is None


def test_parse_port_not_a_number():
    with pytest.raises(URLError, match="port is not a number: '8o'"):
        parse_port("8o")


def test_parse_port_out_of_range():
    with pytest.raises(URLError, match="port out of range: 65536"):
        parse_port("65536")


def test_join_host_port():
    assert join_host_port("example.com", 8080) == "example.com:8080"
    assert join_host_port("::1", 8080) == "[::1]:8080"


def test_join_host_port_drops_default_port():
    assert join_host_port("example.com", 443, "https") == "example.com"
    assert join_host_port("example.com") == "example.com"


def test_unsplit_url():
    url = URL("https", "example.com", 8443, "/a", "x=1", "top")
    assert unsplit_url(url) == "https://example.com:8443/a?x=1#top"


def test_unsplit_url_without_host():
    assert unsplit_url(URL("mailto", "", None, "bob@example.com", "", "")) == "mailto:bob@example.com"


def test_origin():
    assert origin("https://a.example:8443/x?y") == "https://a.example:8443"


def test_origin_needs_host():
    with pytest.raises(URLError, match="no host in 'mailto:x'"):
        origin("mailto:x")


def test_remove_dot_segments():
    assert remove_dot_segments("") == ""
    assert remove_dot_segments("/a/b/../c/./d") == "/a/c/d"


def test_remove_dot_segments_trailing_dots():
    assert remove_dot_segments("/a/b/..") == "/a/"
    assert remove_dot_segments("/a/.") == "/a/"


def test_remove_dot_segments_stops_at_root():
    assert remove_dot_segments("/../../a") == "/a"


def test_remove_dot_segments_rejects_relative_path():
    with pytest.raises(URLError, match="not an absolute path: 'a/b'"):
        remove_dot_segments("a/b")


def test_normalize_url():
    assert normalize_url("https://example.com") == "https://example.com/"
    assert normalize_url("HTTP://Example.COM:80/a/./b/../%7ec?x=%2f") == "http://example.com/a/~c?x=%2F"


def test_normalize_url_without_host():
    assert normalize_url("MAILTO:bob%40example.com") == "mailto:bob%40example.com"


def test_normalize_url_keeps_other_ports():
    assert normalize_url("https://Example.com:8443/a/../b/") == "https://example.com:8443/b/"


def test_resolve_relative_path():
    assert resolve("http://h/a/b/c?q", "d/../e") == "http://h/a/b/e"


def test_resolve_absolute_path_and_query():
    assert resolve("http://h/a/b", "/x?y=1#z") == "http://h/x?y=1#z"


def test_resolve_query_and_fragment_only():
    assert resolve("http://h/a?q=1", "?r=2") == "http://h/a?r=2"
    assert resolve("http://h/a?q=1", "#frag") == "http://h/a?q=1#frag"


def test_resolve_other_scheme_and_network_path():
    assert resolve("http://h/a", "mailto:x@y") == "mailto:x@y"
    assert resolve("https://h/a", "//cdn.example/lib.js") == "https://cdn.example/lib.js"


def test_redact_password():
    assert redact_password("https://bob:secret@host/p@th") == "https://bob:******@host/p@th"


def test_redact_password_without_password():
    assert redact_password("https://bob@host/") == "https://bob@host/"
