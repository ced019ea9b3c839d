"""Cell text: values turned into text, cut to a width and padded into a column."""

ELLIPSIS = "..."
SIDES = {"left": "<", "right": ">", "center": "^", "<": "<", ">": ">", "^": "^"}


def cell_text(value, places=2):
    """The text of one value: None is empty, bools are yes/no, floats get ``places`` decimals."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "%.*f" % (places, value)
    return str(value)


def side_of(how):
    """The sign of an alignment: ``"left"`` or ``"<"``, ``"right"`` or ``">"``, ``"center"`` or ``"^"``."""
    return SIDES[how.strip().lower()]


def truncate(text, width):
    """``text`` cut to ``width`` characters, ending in ``...`` when something was cut."""
    if width < 0:
        raise ValueError("negative width: %d" % width)
    if len(text) <= width:
        return text
    if width < len(ELLIPSIS):
        return text[:width]
    return text[:width - len(ELLIPSIS)] + ELLIPSIS


def pad(text, width, how="left", fill=" "):
    """``text`` padded with ``fill`` to ``width`` characters on the side(s) that ``how`` names."""
    if len(fill) != 1:
        raise ValueError("fill must be one character, not %r" % fill)
    room = width - len(text)
    if room < 0:
        raise ValueError("%r is wider than %d" % (text, width))
    side = side_of(how)
    if side == ">":
        return fill * room + text
    if side == "^":
        half = room // 2
        return fill * half + text + fill * (room - half)
    return text + fill * room


def align_decimals(texts):
    """Number texts padded to one width with their decimal points under each other."""
    parts = [text.partition(".") for text in texts]
    left = max([len(part[0]) for part in parts])
    right = max([len(part[1] + part[2]) for part in parts])
    return [pad(part[0], left, ">") + pad(part[1] + part[2], right) for part in parts]


def fit(text, width, how="left"):
    """``text`` cut or padded to exactly ``width`` characters."""
    return pad(truncate(text, width), width, how)
