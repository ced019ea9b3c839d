"""Evaluate a parsed expression tree."""

import operator

from minicalc.parser import parse

OPERATORS = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.floordiv,
    "//": operator.floordiv,
    "%": operator.mod,
    "^": operator.pow,
}


def evaluate_tree(node):
    kind = node[0]
    if kind == "num":
        return node[1]
    if kind == "neg":
        return -evaluate_tree(node[1])
    if kind == "binop":
        _, op, left, right = node
        return OPERATORS[op](evaluate_tree(left), evaluate_tree(right))
    raise ValueError(f"unknown node {kind!r}")


def evaluate(expr):
    """Evaluate the arithmetic expression ``expr`` and return an int or a float."""
    return evaluate_tree(parse(expr))
