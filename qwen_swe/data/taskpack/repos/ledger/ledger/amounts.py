"""Parse amounts written as text into integer cents."""

import re

AMOUNT_RE = re.compile(r"[-+]?\d+(\.\d{1,2})?")


def parse_amount(text):
    """``"1,234.5"`` -> ``123450``; accepts a sign, thousands separators and up to two decimals."""
    cleaned = text.strip().replace(",", "")
    if not AMOUNT_RE.fullmatch(cleaned):
        raise ValueError(f"not an amount: {text!r}")
    whole, _, fraction = cleaned.partition(".")
    cents = int(whole) * 100
    fraction_cents = int((fraction + "00")[:2])
    if cents < 0:
        return cents - fraction_cents
    return cents + fraction_cents
