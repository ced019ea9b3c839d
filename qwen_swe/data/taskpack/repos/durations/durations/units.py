"""Units of time: their names, their sizes in seconds, and conversion between them."""

MINUTE = 60
HOUR = 3600
DAY = 86400
WEEK = 604800


class UnitTable(dict):
    """A dict keyed by unit that raises ValueError, not KeyError, for a unit it does not know."""

    def __missing__(self, key):
        raise ValueError("unknown unit " + repr(key) + ", expected one of: " + ", ".join(self))


SECONDS = UnitTable(w=WEEK, d=DAY, h=HOUR, m=MINUTE, s=1)

NAMES = UnitTable(w="week", d="day", h="hour", m="minute", s="second")

ALIASES = UnitTable(
    w="w", wk="w", wks="w", week="w", weeks="w",
    d="d", day="d", days="d",
    h="h", hr="h", hrs="h", hour="h", hours="h",
    m="m", min="m", mins="m", minute="m", minutes="m",
    s="s", sec="s", secs="s", second="s", seconds="s",
)


def unit_of(name):
    """The one-letter unit for any of its names: "Hours", " hr " and "h" all give "h"."""
    return ALIASES[name.strip().lower()]


def size_of(unit):
    """Seconds in one ``unit`` (any name that ``unit_of`` knows)."""
    return SECONDS[unit_of(unit)]


def unit_name(unit, count):
    """The English name of ``unit`` for ``count`` of them: "hour", "hours"."""
    name = NAMES[unit_of(unit)]
    return name if count == 1 else name + "s"


def convert(value, unit, to):
    """``value`` in ``unit`` expressed in unit ``to``: convert(90, "min", "h") == 1.5."""
    return value * size_of(unit) / size_of(to)
