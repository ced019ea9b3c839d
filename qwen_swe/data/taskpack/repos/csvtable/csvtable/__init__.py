"""csvtable: rows of data as aligned plain-text tables and as delimited (CSV-like) lines."""

from csvtable.cells import align_decimals, cell_text, fit, pad, side_of, truncate
from csvtable.columns import Column, column_widths, even_rows, parse_column
from csvtable.fields import check_delimiter, join_line, needs_quotes, quote, split_line, unquote
from csvtable.render import markdown_rule, parse_csv, render_csv, render_markdown, render_record, render_table
from csvtable.render import rule, title_rule

__all__ = [
    "Column", "align_decimals", "cell_text", "check_delimiter", "column_widths", "even_rows", "fit",
    "join_line", "markdown_rule", "needs_quotes", "pad", "parse_column", "parse_csv", "quote", "render_csv",
    "render_markdown", "render_record", "render_table", "rule", "side_of", "split_line", "title_rule",
    "truncate", "unquote",
]
