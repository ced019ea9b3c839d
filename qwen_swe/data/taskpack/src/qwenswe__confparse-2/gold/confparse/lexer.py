"""Line-level helpers: comments, quotes and assignments."""

COMMENT_MARKERS = ("#", ";")


def strip_comment(line):
    """Remove a comment (``# ...`` or ``; ...``) and trailing whitespace from ``line``."""
    for marker in COMMENT_MARKERS:
        index = line.find(marker)
        if index != -1:
            line = line[:index]
    return line.rstrip()


def unquote(value):
    """Remove one pair of matching surrounding quotes, if present."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def split_assignment(line):
    """``"key = value"`` -> ``("key", "value")``; ``None`` when the line has no ``=``."""
    if "=" not in line:
        return None
    key, _, value = line.partition("=")
    return key.strip(), unquote(value.strip())
