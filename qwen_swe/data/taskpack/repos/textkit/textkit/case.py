"""Convert identifiers between naming styles."""


def snake_to_camel(name, upper_first=False):
    """``parse_http_header`` -> ``parseHttpHeader`` (``ParseHttpHeader`` with ``upper_first``)."""
    leading = len(name) - len(name.lstrip("_"))
    parts = [part for part in name.strip("_").split("_") if part]
    if not parts:
        return name
    head, rest = parts[0], parts[1:]
    head = head[:1].upper() + head[1:] if upper_first else head
    return "_" * leading + head + "".join(part[:1].upper() + part[1:] for part in rest)
