"""durations: parse, format and do arithmetic on spans of time."""

from durations.arith import round_to, scale, seconds_of, total
from durations.format import (
    format_clock, format_compact, format_decimal, format_iso, format_long, format_relative, format_row,
    format_table, format_words, largest_unit, split,
)
from durations.parse import parse, parse_clock, parse_entries, parse_iso, parse_span, parse_units
from durations.units import convert, size_of, unit_name, unit_of

__all__ = [
    "convert", "format_clock", "format_compact", "format_decimal", "format_iso", "format_long",
    "format_relative", "format_row", "format_table", "format_words", "largest_unit", "parse", "parse_clock",
    "parse_entries", "parse_iso", "parse_span", "parse_units", "round_to", "scale", "seconds_of", "size_of", "split",
    "total", "unit_name", "unit_of",
]
