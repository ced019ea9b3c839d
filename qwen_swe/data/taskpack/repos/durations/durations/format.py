"""Write seconds as "1h 30m", "01:30:00", "1.5 hours" or "PT1H30M"."""

from durations.units import DAY, HOUR, MINUTE, convert, size_of, unit_name, unit_of


def split(seconds, units="dhms"):
    """(count, unit) pairs for ``seconds``, largest unit first, zero counts left out: 5400 -> [(1, "h"), (30, "m")]."""
    parts = []
    for unit in units:
        size = size_of(unit)
        count, seconds = divmod(seconds, size)
        if count:
            parts.append((count, unit))
    return parts


def largest_unit(seconds):
    """The largest unit that fits at least once in ``seconds``: 5400 -> "h", 0 -> "s"."""
    return next((unit for unit in "wdhm" if abs(seconds) >= size_of(unit)), "s")


def format_compact(seconds, units="dhms", separator=" "):
    """5400 -> "1h 30m"; -90 -> "-1m 30s"; 0 -> "0s" (in the last of ``units``)."""
    if seconds < 0:
        return "-" + format_compact(-seconds, units, separator)
    parts = split(seconds, units)
    if not parts:
        return "0" + units[-1]
    return separator.join("%d%s" % part for part in parts)


def format_clock(seconds, show_seconds=True):
    """5400 -> "01:30:00"; "01:30" with ``show_seconds=False`` (the seconds are dropped, not rounded)."""
    sign = "-" if seconds < 0 else ""
    hours, rest = divmod(abs(seconds), HOUR)
    minutes, secs = divmod(rest, MINUTE)
    if show_seconds:
        return sign + "%02d:%02d:%02d" % (hours, minutes, secs)
    return sign + "%02d:%02d" % (hours, minutes)


def format_words(seconds, unit=None, digits=1):
    """5400 -> "1.5 hours", 60 -> "1 minute": in ``unit``, or else in the largest unit that fits."""
    unit = unit or largest_unit(seconds)
    ratio = seconds / size_of(unit)
    value = round(ratio, digits)
    return str(value).removesuffix(".0") + " " + unit_name(unit, value)


def format_decimal(seconds, unit="h", digits=2):
    """Seconds as a decimal number of ``unit``, the way timesheets show them: 5400 -> "1.50h"."""
    return "%.*f" % (digits, convert(seconds, "s", unit)) + unit_of(unit)


def format_relative(seconds):
    """300 -> "in 5 minutes", -5400 -> "1.5 hours ago" (see ``format_words``)."""
    words = format_words(abs(seconds))
    return "in " + words if seconds >= 0 else words + " ago"


def format_iso(seconds):
    """ISO 8601: 5400 -> "PT1H30M", 90000 -> "P1DT1H", 0 -> "PT0S"."""
    if seconds < 0:
        raise ValueError("an ISO 8601 duration cannot be negative: " + str(seconds))
    days, rest = divmod(seconds, DAY)
    date = "%dD" % days if days else ""
    time = "T" + format_compact(rest, "hms", "").upper() if rest or not days else ""
    return "P" + date + time


def format_long(seconds):
    """5415 -> "1 hour, 30 minutes and 15 seconds"; 0 -> "0 seconds"."""
    words = [str(count) + " " + unit_name(unit, count) for count, unit in split(seconds)]
    *rest, last = words or ["0 seconds"]
    return ", ".join(rest) + " and " + last if rest else last


def format_row(label, seconds, width=30):
    """A report line ``width`` characters wide: the label, dots, then the duration on the right."""
    duration = " " + format_compact(seconds)
    room = width - len(duration)
    return (label + " ").ljust(room, ".") + duration


def format_table(entries, width=30):
    """One ``format_row`` per (label, seconds) pair, then a rule and a row with their total."""
    rows = [format_row(label, seconds, width) for label, seconds in entries]
    total = sum(seconds for label, seconds in entries)
    return "\n".join(rows + ["-" * width, format_row("total", total, width)])
