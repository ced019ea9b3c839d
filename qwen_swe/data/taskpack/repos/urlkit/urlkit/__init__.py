"""urlkit: split, build, quote and resolve URLs without touching the network."""

from urlkit.errors import URLError
from urlkit.percent import escape_byte, normalize_escapes, quote, quote_plus, unquote, unquote_plus
from urlkit.query import build_query, get_param, parse_pairs, parse_query, remove_param, set_param
from urlkit.urls import URL, join_host_port, normalize_url, origin, parse_port, redact_password
from urlkit.urls import remove_dot_segments, resolve, split_host_port, split_url, unsplit_url

__all__ = ["URL", "URLError", "build_query", "escape_byte", "get_param", "join_host_port",
           "normalize_escapes", "normalize_url", "origin", "parse_pairs", "parse_port", "parse_query", "quote",
           "quote_plus", "redact_password", "remove_dot_segments", "remove_param", "resolve", "set_param",
           "split_host_port", "split_url", "unquote", "unquote_plus", "unsplit_url"]
