"""Render entries as a plain-text report."""


def format_amount(cents):
    """``123450`` -> ``"1,234.50"``; ``-50`` -> ``"-0.50"``."""
    sign = "-" if cents < 0 else ""
    units, rest = divmod(abs(cents), 100)
    return f"{sign}{units:,}.{rest:02d}"


def render_report(entries, width=40):
    """One line per entry, then the total; descriptions are padded or cut to fit ``width``."""
    lines = []
    for entry in entries:
        amount = format_amount(entry.cents)
        room = width - len(entry.date) - len(amount) - 2
        description = entry.description[:room].ljust(room)
        lines.append(f"{entry.date} {description} {amount}")
    total = format_amount(sum(entry.cents for entry in entries))
    lines.append("-" * width)
    lines.append("TOTAL".ljust(width - len(total)) + total)
    return "\n".join(lines)
