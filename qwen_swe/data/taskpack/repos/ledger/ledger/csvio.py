"""Read statement entries from CSV text."""

import csv
import io
from dataclasses import dataclass

from ledger.amounts import parse_amount

COLUMNS = ("date", "description", "amount")


@dataclass(frozen=True)
class Entry:
    date: str
    description: str
    cents: int


def read_entries(text):
    """Entries of a CSV statement with a ``date,description,amount`` header, in file order."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [name for name in COLUMNS if name not in (reader.fieldnames or [])]
    if missing:
        raise ValueError(f"CSV header lacks column(s): {', '.join(missing)}")
    entries = []
    for line_number, record in enumerate(reader, start=2):
        try:
            cents = parse_amount(record["amount"])
        except ValueError as exc:
            raise ValueError(f"line {line_number}: {exc}") from None
        entries.append(Entry(record["date"], record["description"].strip(), cents))
    return entries
