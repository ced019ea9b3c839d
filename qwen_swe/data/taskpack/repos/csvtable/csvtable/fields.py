"""Quote, unquote, split and join the fields of one delimited line."""

QUOTE = '"'


def check_delimiter(delimiter):
    """``delimiter`` if it is one character that is neither a quote nor a line break, else ValueError."""
    if len(delimiter) != 1 or delimiter in QUOTE + "\r\n":
        raise ValueError("bad delimiter: %r" % delimiter)
    return delimiter


def needs_quotes(text, delimiter=","):
    """Whether ``text`` must be quoted to stay one field: edge spaces, a delimiter, a quote or a line break."""
    return text != text.strip() or any(char in text for char in check_delimiter(delimiter) + QUOTE + "\r\n")


def quote(text, delimiter=","):
    """``text`` as one field: in quotes, with its own quotes doubled, when :func:`needs_quotes` says so."""
    if needs_quotes(text, delimiter):
        return QUOTE + text.replace(QUOTE, QUOTE * 2) + QUOTE
    return text


def unquote(field):
    """The value of one field: spaces outside quotes dropped, quotes removed, doubled quotes made single."""
    field = field.strip()
    if not field.startswith(QUOTE):
        return field
    if field.count(QUOTE) % 2 or not field.endswith(QUOTE):
        raise ValueError("unterminated quote in %r" % field)
    return field[1:-1].replace(QUOTE * 2, QUOTE)


def split_line(line, delimiter=","):
    """The values of one delimited line; a quoted field may hold the delimiter."""
    pieces = []
    for piece in line.split(check_delimiter(delimiter)):
        if pieces and pieces[-1].count(QUOTE) % 2 == 1:
            pieces[-1] = pieces[-1] + delimiter + piece
        else:
            pieces.append(piece)
    return [unquote(piece) for piece in pieces]


def join_line(values, delimiter=","):
    """One delimited line of the text ``values``, each quoted where it needs to be."""
    return check_delimiter(delimiter).join([quote(value, delimiter) for value in values])
