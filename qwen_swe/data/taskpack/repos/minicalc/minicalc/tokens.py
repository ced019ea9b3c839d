"""Split an arithmetic expression into tokens."""

import re
from dataclasses import dataclass

TOKEN_RE = re.compile(r"\s*(?:(\d+\.\d*|\.\d+|\d+)|(//|[-+*/%^()]))")


class CalcSyntaxError(ValueError):
    """The expression is not valid minicalc syntax."""


@dataclass(frozen=True)
class Token:
    kind: str  # "num", "op", "lparen" or "rparen"
    text: str
    pos: int


def tokenize(expr):
    """Return the list of tokens of ``expr``; raise CalcSyntaxError on an unknown character."""
    tokens = []
    expr = expr.rstrip()
    pos = 0
    while pos < len(expr):
        match = TOKEN_RE.match(expr, pos)
        if match is None:
            bad = pos + len(expr[pos:]) - len(expr[pos:].lstrip())
            raise CalcSyntaxError(f"unexpected character {expr[bad]!r} at position {bad}")
        number, op = match.groups()
        if number is not None:
            tokens.append(Token("num", number, match.start(1)))
        elif op == "(":
            tokens.append(Token("lparen", op, match.start(2)))
        elif op == ")":
            tokens.append(Token("rparen", op, match.start(2)))
        else:
            tokens.append(Token("op", op, match.start(2)))
        pos = match.end()
    return tokens
