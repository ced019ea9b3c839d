"""Rows of values as a framed plain-text table, a Markdown table or delimited lines, and back."""

from csvtable.cells import cell_text, fit, pad
from csvtable.columns import column_widths, even_rows, parse_column
from csvtable.fields import join_line, split_line

MARKS = {"<": (":", "-"), ">": ("-", ":"), "^": (":", ":")}


def rule(widths, corner="+", line="-"):
    """A border line such as ``+-----+---+``: each column's width plus a space on either side."""
    return corner + corner.join([line + line * width + line for width in widths]) + corner


def title_rule(title, width, corner="+", line="-"):
    """A top border ``width`` characters long with ``title`` in its middle: ``+--- Fruit ---+``."""
    return corner + pad(" " + title + " ", width - 2, "center", line) + corner


def framed(cells, widths, sides, edge="|"):
    """One table line, ``| a   | b |``: each cell fitted to its column's width and alignment."""
    fitted = [fit(cell, width, side) for cell, width, side in zip(cells, widths, sides)]
    return edge + " " + (" " + edge + " ").join(fitted) + " " + edge


def cell_rows(rows, count):
    """The text of every value of ``rows``, each row evened out to ``count`` cells."""
    texts = [[cell_text(value) for value in row] for row in rows]
    return even_rows(texts, count)


def render_table(specs, rows, title=""):
    """``rows`` of values as a framed table under a header line of the column names and an optional title."""
    columns = [parse_column(spec) for spec in specs]
    count = len(columns)
    texts = cell_rows(rows, count)
    widths = column_widths(columns, texts)
    border = rule(widths)
    top = title_rule(title, len(border)) if title else border
    header = framed([column.name for column in columns], widths, "^" * count)
    body = [framed(row, widths, [column.side for column in columns]) for row in texts]
    return "\n".join([top, header, border] + body + [border])


def markdown_rule(widths, sides):
    """The line under a Markdown header: dashes, with a colon on the side each column is aligned to."""
    cells = [MARKS[side][0] + "-" * (width - 2) + MARKS[side][1] for width, side in zip(widths, sides)]
    return "| " + " | ".join(cells) + " |"


def render_markdown(specs, rows):
    """``rows`` of values as a Markdown table; every column is at least three characters wide."""
    columns = [parse_column(spec) for spec in specs]
    count = len(columns)
    texts = cell_rows(rows, count)
    widths = [max(width, 3) for width in column_widths(columns, texts)]
    sides = [column.side for column in columns]
    lines = [framed([column.name for column in columns], widths, "<" * count), markdown_rule(widths, sides)]
    lines += [framed(row, widths, sides) for row in texts]
    return "\n".join(lines)


def render_record(names, values, separator=": "):
    """One ``name: value`` line per field, the names right-aligned under each other."""
    width = max([len(name) for name in names])
    return "\n".join([pad(name, width, ">") + separator + cell_text(value) for name, value in zip(names, values)])


def render_csv(specs, rows, delimiter=","):
    """A header line of the column names, then one delimited line per row of values."""
    names = [parse_column(spec).name for spec in specs]
    lines = [join_line(names, delimiter)]
    lines += [join_line([cell_text(value) for value in row], delimiter) for row in rows]
    return "\n".join(lines) + "\n"


def parse_csv(text, delimiter=","):
    """Delimited text under a header line -> one dict per line, keyed by the header's names."""
    lines = text.splitlines()
    names = split_line(lines[0], delimiter)
    records = []
    for number, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        values = split_line(line, delimiter)
        if len(values) != len(names):
            raise ValueError("line %d has %d fields, expected %d" % (number, len(values), len(names)))
        records.append(dict(zip(names, values)))
    return records
