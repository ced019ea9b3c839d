"""Line-level helpers: comments, quotes and assignments."""

COMMENT_MARKERS = ("#", ";")


def strip_comment(line):
    """Remove a comment (``# ...`` or ``; ...``) and trailing whitespace from ``line``.

    Comment markers inside a quoted value are kept. A quote only opens a quoted value where a value
    starts (after ``=`` or at the start of the line), so an apostrophe inside a word does not.
    """
    quote = None
    previous = ""
    for index, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "\"'" and previous in ("", "="):
            quote = char
        elif char in COMMENT_MARKERS:
            return line[:index].rstrip()
        if not char.isspace():
            previous = char
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
    key, value = line.split("=")
    return key.strip(), unquote(value.strip())
