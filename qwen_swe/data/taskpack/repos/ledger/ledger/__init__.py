"""ledger: CSV statements in, summary reports out; amounts are integer cents."""

from ledger.amounts import parse_amount
from ledger.csvio import Entry, read_entries
from ledger.report import format_amount, render_report

__all__ = ["Entry", "format_amount", "parse_amount", "read_entries", "render_report"]
