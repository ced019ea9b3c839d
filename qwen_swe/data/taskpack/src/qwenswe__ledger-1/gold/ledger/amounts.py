"""Parse amounts written as text into integer cents."""

import re

AMOUNT_RE = re.compile(r"[-+]?\d+(\.\d{1,2})?")


def parse_amount(text):
    """``"1,234.5"`` -> ``123450``; accepts a sign, thousands separators and up to two decimals."""
    cleaned = text.strip().replace(",", "")
    if not AMOUNT_RE.fullmatch(cleaned):
        raise ValueError(f"not an amount: {text!r}")
    sign = -1 if cleaned.startswith("-") else 1
    whole, _, fraction = cleaned.lstrip("+-").partition(".")
    return sign * (int(whole) * 100 + int((fraction + "00")[:2]))
