"""Column specs such as ``"price:>8"``, rows evened out, and the widths of columns."""

import re
from dataclasses import dataclass

SPEC_RE = re.compile(r"\s*(\w+)\s*(?::\s*([<>^])?\s*(\d+)?)?\s*")
SIGNS = ("<", ">", "^")


@dataclass(frozen=True)
class Column:
    """A column: its header ``name``, its alignment sign and a fixed ``width`` (0: as wide as its cells)."""

    name: str
    side: str = "<"
    width: int = 0

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError("bad column name: %r" % self.name)
        if self.side not in SIGNS:
            raise ValueError("bad alignment: %r" % self.side)
        if self.width < 0:
            raise ValueError("negative width: %d" % self.width)


def parse_column(spec):
    """``"price:>8"`` -> ``Column("price", ">", 8)``; the alignment and the width may be left out."""
    match = SPEC_RE.fullmatch(spec)
    if match is None:
        raise ValueError("bad column spec: %r" % spec)
    return Column(match.group(1), match.group(2) or "<", int(match.group(3) or 0))


def even_rows(rows, count):
    """Rows of exactly ``count`` cells: short rows get empty cells at the end, a long row is an error."""
    result = []
    for number, row in enumerate(rows, 1):
        if len(row) > count:
            raise ValueError("row %d has %d cells, more than %d" % (number, len(row), count))
        result.append(list(row) + [""] * (count - len(row)))
    return result


def column_widths(columns, rows):
    """Each column's width: its fixed width, or else the longest of its name and its cells."""
    widths = []
    for index, column in enumerate(columns):
        lengths = [len(column.name)] + [len(row[index]) for row in rows]
        widths.append(column.width or max(lengths))
    return widths
