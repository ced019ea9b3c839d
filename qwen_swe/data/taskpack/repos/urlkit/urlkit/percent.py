"""Percent-encoding and decoding, done by hand."""

import re
import string

from urlkit.errors import check

UNRESERVED = string.ascii_letters + string.digits + "-._~"
HEX_DIGITS = "0123456789ABCDEF"
ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


def escape_byte(byte):
    """``32`` -> ``"%20"``: one byte as a percent escape with upper-case hex digits."""
    check(isinstance(byte, int), "not a byte: %r" % byte)
    return "%" + HEX_DIGITS[byte // 16] + HEX_DIGITS[byte % 16]


def quote(text, safe="/"):
    """Percent-encode every UTF-8 byte of ``text`` that is neither unreserved nor in ``safe``."""
    check(isinstance(text, str), "quote() needs a str, not %s" % type(text).__name__)
    allowed = UNRESERVED + safe
    pieces = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        pieces.append(char if char in allowed else escape_byte(byte))
    return "".join(pieces)


def quote_plus(text, safe=""):
    """Like ``quote`` for form values: spaces become ``+`` and ``/`` is escaped too."""
    return quote(text, safe + " ").replace(" ", "+")


def unquote(text, errors="strict"):
    """Decode the percent escapes in ``text``; the bytes they stand for are read as UTF-8."""
    pieces = text.split("%")
    data = bytearray(pieces[0], "utf-8")
    for piece in pieces[1:]:
        check(len(piece) >= 2, "truncated percent escape: %" + piece)
        data.append(int(piece[:2], 16))
        data.extend(piece[2:].encode("utf-8"))
    return data.decode("utf-8", errors)


def unquote_plus(text):
    """Like ``unquote`` for form values: ``+`` stands for a space."""
    return unquote(text.replace("+", " "))


def _normalize_escape(match):
    char = chr(int(match.group(1), 16))
    return char if char in UNRESERVED else "%" + match.group(1).upper()


def normalize_escapes(text):
    """Upper-case the hex digits of escapes and decode the ones that stand for unreserved characters."""
    return ESCAPE.sub(_normalize_escape, text)
