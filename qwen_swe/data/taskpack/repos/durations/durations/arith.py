"""Add, scale and round durations given as seconds or as text."""

from durations.parse import parse
from durations.units import size_of


def seconds_of(value):
    """Seconds in ``value``: a str is parsed, an int is taken as seconds."""
    if isinstance(value, str):
        return parse(value)
    if isinstance(value, int):
        return value
    raise TypeError("expected a duration as text or seconds, got " + type(value).__name__)


def total(*values):
    """The sum of durations: total("1h", "30m", 90) == 5490."""
    return sum(map(seconds_of, values))


def scale(value, factor):
    """``value`` times ``factor``, rounded to whole seconds: scale("1h", 1.5) == 5400."""
    return round(seconds_of(value) * factor)


def round_to(value, unit):
    """``value`` rounded to a whole number of ``unit``s, halves to even as ``round`` does."""
    size = size_of(unit)
    return round(seconds_of(value) / size) * size
