"""URL slugs."""

import re
import unicodedata


def slugify(text, separator="-"):
    """Lower-case ASCII slug of ``text``: accents dropped, runs of other characters become one separator."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    words = re.findall(r"[a-z0-9]+", ascii_text.lower())
    return separator.join(words)
