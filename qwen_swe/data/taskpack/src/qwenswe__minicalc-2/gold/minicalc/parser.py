"""Parse tokens into a small tree of tuples by precedence climbing.

Nodes: ("num", value), ("neg", node), ("binop", op, left, right).
"""

from minicalc.tokens import CalcSyntaxError, tokenize

# Binding strength of each binary operator; higher binds tighter.
PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "//": 2, "%": 2, "^": 3}
# Operators that group from the right: a ^ b ^ c == a ^ (b ^ c).
RIGHT_ASSOCIATIVE = {"^"}


class Parser:
    def __init__(self, tokens):
        self.tokens = tokens
        self.index = 0

    def peek(self):
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def advance(self):
        token = self.peek()
        if token is None:
            raise CalcSyntaxError("unexpected end of expression")
        self.index += 1
        return token

    def parse(self):
        node = self.expression(1)
        extra = self.peek()
        if extra is not None:
            raise CalcSyntaxError(f"unexpected {extra.text!r} at position {extra.pos}")
        return node

    def expression(self, min_precedence):
        left = self.unary()
        while True:
            token = self.peek()
            if token is None or token.kind != "op" or PRECEDENCE[token.text] < min_precedence:
                return left
            self.advance()
            precedence = PRECEDENCE[token.text]
            next_min = precedence if token.text in RIGHT_ASSOCIATIVE else precedence + 1
            right = self.expression(next_min)
            left = ("binop", token.text, left, right)

    def unary(self):
        token = self.peek()
        if token is not None and token.kind == "op" and token.text in ("-", "+"):
            self.advance()
            operand = self.unary()
            return ("neg", operand) if token.text == "-" else operand
        return self.primary()

    def primary(self):
        token = self.advance()
        if token.kind == "num":
            value = float(token.text) if "." in token.text else int(token.text)
            return ("num", value)
        if token.kind == "lparen":
            node = self.expression(1)
            closing = self.advance()
            if closing.kind != "rparen":
                raise CalcSyntaxError(f"expected ')' at position {closing.pos}")
            return node
        raise CalcSyntaxError(f"unexpected {token.text!r} at position {token.pos}")


def parse(expr):
    """Parse ``expr`` into a tree; raise CalcSyntaxError when it is malformed."""
    tokens = tokenize(expr)
    if not tokens:
        raise CalcSyntaxError("empty expression")
    return Parser(tokens).parse()
