"""Convert identifiers between naming styles."""

import re

# A word starts at a capital that follows a lower-case letter or digit, or at the last capital of a run
# of capitals that is followed by a lower-case letter ("HTTPResponse" -> "HTTP", "Response").
_WORD_START = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def snake_to_camel(name, upper_first=False):
    """``parse_http_header`` -> ``parseHttpHeader`` (``ParseHttpHeader`` with ``upper_first``)."""
    leading = len(name) - len(name.lstrip("_"))
    parts = [part for part in name.strip("_").split("_") if part]
    if not parts:
        return name
    head, rest = parts[0], parts[1:]
    head = head[:1].upper() + head[1:] if upper_first else head
    return "_" * leading + head + "".join(part[:1].upper() + part[1:] for part in rest)


def camel_to_snake(name):
    """``parseHttpHeader`` -> ``parse_http_header``; ``HTTPResponseCode`` -> ``http_response_code``."""
    return _WORD_START.sub("_", name).lower()
