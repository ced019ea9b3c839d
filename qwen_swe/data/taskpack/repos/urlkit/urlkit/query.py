"""Parse and build query strings."""

from urlkit.percent import quote_plus, unquote_plus


def parse_pairs(query):
    """``"a=1&b=x+y&c"`` -> ``[("a", "1"), ("b", "x y"), ("c", "")]``; a leading ``?`` is ignored."""
    pairs = []
    for field in query.lstrip("?").split("&"):
        if not field:
            continue
        name, value = field.split("=", 1) if "=" in field else (field, "")
        pairs.append((unquote_plus(name), unquote_plus(value)))
    return pairs


def parse_query(query):
    """``"a=1&b=2&a=3"`` -> ``{"a": ["1", "3"], "b": ["2"]}``."""
    result = {}
    for name, value in parse_pairs(query):
        result[name] = result.get(name, []) + [value]
    return result


def get_param(query, name, default=None):
    """The first value of ``name`` in ``query``, or ``default`` when it is missing."""
    values = parse_query(query).get(name)
    return values[0] if values else default


def _text(value):
    """The query-string text of one value: ``True`` -> ``"true"``, ``None`` -> ``""``, ``3.0`` -> ``"3"``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "%g" % value
    return "" if value is None else str(value)


def build_query(params):
    """``{"q": "a b", "page": 2}`` -> ``"q=a+b&page=2"``; a list value repeats the name."""
    items = params.items() if isinstance(params, dict) else params
    fields = []
    for name, value in items:
        for item in value if isinstance(value, list) else [value]:
            fields.append(quote_plus(name) + "=" + quote_plus(_text(item)))
    return "&".join(fields)


def _replace_param(url, name, new_pairs):
    """``url`` with every ``name`` dropped from its query and ``new_pairs`` appended; the fragment is kept."""
    base, hash_mark, fragment = url.partition("#")
    path, _, query = base.partition("?")
    pairs = [pair for pair in parse_pairs(query) if pair[0] != name] + new_pairs
    query = build_query(pairs)
    return path + ("?" + query if query else "") + hash_mark + fragment


def set_param(url, name, value):
    """``url`` with ``name`` set to ``value`` in its query, replacing earlier values."""
    return _replace_param(url, name, [(name, value)])


def remove_param(url, name):
    """``url`` without any ``name`` in its query; the ``?`` goes too when nothing is left."""
    return _replace_param(url, name, [])
