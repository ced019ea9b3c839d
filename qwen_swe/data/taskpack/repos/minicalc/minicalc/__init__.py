"""minicalc: evaluate small arithmetic expressions."""

from minicalc.evaluate import evaluate
from minicalc.parser import parse
from minicalc.tokens import CalcSyntaxError, tokenize

__all__ = ["CalcSyntaxError", "evaluate", "parse", "tokenize"]
