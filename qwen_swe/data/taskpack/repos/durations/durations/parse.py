"""Read durations written as "1h30m15s", "90 minutes", "01:02:03" or "PT1H30M" as whole seconds."""

import re

from durations.units import DAY, size_of, unit_of

AMOUNT = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)")
AMOUNTS = re.compile(r"\d+(?:\.\d+)?\s*[a-z]+(?:(?:\s*,\s*|\s+and\s+|\s*)\d+(?:\.\d+)?\s*[a-z]+)*")
CLOCK = re.compile(r"(\d+):([0-5]\d)(?::([0-5]\d))?")
SPAN = re.compile(r"(\d+:\d\d(?::\d\d)?)\s*-\s*(\d+:\d\d(?::\d\d)?)")
ISO = re.compile(r"P(?=T?\d)(?:\d+D)?(?:T(?=\d)(?:\d+H)?(?:\d+M)?(?:\d+S)?)?")


def _match(pattern, text, what):
    """The match of ``pattern`` against all of ``text``; ValueError saying ``what`` was expected if none."""
    match = pattern.fullmatch(text)
    if match is None:
        raise ValueError("expected " + what + ", got " + repr(text))
    return match


def parse_units(text):
    """Seconds in "1h30m15s", "90 minutes" or "2 days, 3 hours and 4.5 minutes" (rounded to whole seconds)."""
    words = _match(AMOUNTS, text.strip().lower(), "numbers with units").group(0)
    amounts = {}
    for match in AMOUNT.finditer(words):
        unit = unit_of(match.group(2))
        if unit in amounts:
            raise ValueError("unit " + repr(unit) + " given twice in " + repr(text))
        amounts[unit] = float(match.group(1))
    return round(sum(amount * size_of(unit) for unit, amount in amounts.items()))


def parse_clock(text):
    """Seconds in a clock-style duration: "1:30" (hours and minutes) or "01:02:03"."""
    match = _match(CLOCK, text.strip(), "a clock time such as 1:30 or 01:02:03")
    hours, minutes, seconds = match.groups("0")
    return parse_units(hours + "h" + minutes + "m" + seconds + "s")


def parse_span(text):
    """Seconds from the first to the second clock time of a range: "9:00-17:30", or past midnight "22:00-1:30"."""
    match = _match(SPAN, text.strip(), "a range of clock times such as 9:00-17:30")
    return (parse_clock(match.group(2)) - parse_clock(match.group(1))) % DAY


def parse_iso(text):
    """Seconds in an ISO 8601 duration of days, hours, minutes and seconds: "PT1H30M", "P2DT3H"."""
    body = _match(ISO, text.strip().upper(), "an ISO 8601 duration such as PT1H30M").group(0)
    return parse_units(body[1:].replace("T", " "))


def parse(text):
    """Seconds in any of the forms above, in plain seconds ("5400"), or negated with a leading "-"."""
    text = text.strip()
    if text.startswith("-"):
        return -parse(text[1:])
    if text.isdigit():
        return int(text)
    if ":" in text:
        return parse_clock(text)
    return parse_iso(text) if text[:1] in "Pp" else parse_units(text)


def parse_entries(text):
    """(label, duration in seconds) pairs from lines such as "coding: 1h30m" or "meeting: 0:45"."""
    entries = []
    for line in text.strip().splitlines():
        if ":" not in line:
            raise ValueError("expected a line such as 'coding: 1h30m', got " + repr(line))
        label, value = line.split(":", 1)
        entries.append((label.strip(), parse(value)))
    return entries
