"""Procedural bugs: every single-line mutation of a Python file that the operators below can make.

Each mutation replaces one source line by another, so the gold patch (the way back) is a one-line diff and the
rest of the file keeps its formatting. Operators, in the spirit of SWE-smith's procedural modifications:
operator and comparison swaps, ``and``/``or`` swaps, off-by-one integer constants, inverted conditions, dropped
string-method calls (``.strip()``...), dropped early returns and swapped call arguments. A mutation that does
not parse, or parses to the same tree, is never produced.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

BINOP_SWAPS = {ast.Add: "-", ast.Sub: "+", ast.Mult: "//", ast.FloorDiv: "*", ast.Div: "//", ast.Mod: "//"}
BINOP_TEXT = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Div: "/", ast.Mod: "%"}
COMPARE_SWAPS = {
    ast.Lt: ("<", "<="),
    ast.LtE: ("<=", "<"),
    ast.Gt: (">", ">="),
    ast.GtE: (">=", ">"),
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
}
DROPPABLE_METHODS = {"strip", "lstrip", "rstrip", "lower", "upper", "casefold", "title"}
SIMPLE_ARGS = (ast.Name, ast.Constant, ast.Attribute, ast.Subscript)


@dataclass(frozen=True)
class Mutation:
    """One bug: ``path`` line ``lineno`` (1-based) goes from ``old`` to ``new``, inside ``function``."""

    path: str  # repository-relative, posix
    lineno: int
    old: str
    new: str
    kind: str
    function: str  # qualified name of the enclosing def, or "<module>"

    @property
    def site(self) -> str:
        """The bug site: what the train/held-out split keeps apart."""
        return f"{self.path}::{self.function}"


def _functions(tree: ast.AST) -> dict[int, str]:
    """Line -> qualified name of the innermost def that holds it."""
    owner: dict[int, str] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                for line in range(child.lineno, (child.end_lineno or child.lineno) + 1):
                    owner[line] = name
                walk(child, name + ".")
            else:
                walk(child, prefix)

    walk(tree, "")
    return owner


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def _one_line(node: ast.expr | ast.stmt) -> bool:
    return getattr(node, "lineno", None) is not None and node.lineno == node.end_lineno


Edit = Callable[[bytes], "bytes | None"]  # one source line (bytes: ast columns are UTF-8 offsets) -> mutated


def _swap_token(start: int | None, end: int | None, old: str, new: str) -> Edit:
    """Replace the operator ``old`` that is all there is (besides spaces) between columns ``start`` and ``end``."""

    def edit(line: bytes) -> bytes | None:
        gap = line[start:end].decode()
        return line[:start] + gap.replace(old, new, 1).encode() + line[end:] if gap.strip() == old else None

    return edit


def _rewrite(start: int | None, end: int | None, new: Callable[[str, bytes], str | None]) -> Edit:
    """Replace columns ``start:end`` by ``new(segment, line)`` (None: no mutation here)."""

    def edit(line: bytes) -> bytes | None:
        text = new(line[start:end].decode(), line)
        return None if text is None else line[:start] + text.encode() + line[end:]

    return edit


def _constant(text: str) -> Callable[[str, bytes], str | None]:
    return lambda _s, _l: text


def _columns(a: int | None, b: int | None) -> Callable[[str, bytes], str | None]:
    """The line's columns ``a:b`` (the call's receiver, for ``drop_call``)."""
    return lambda _s, line: line[a:b].decode()


def _swapped(a0: int | None, a1: int | None, b0: int | None, b1: int | None) -> Callable[[str, bytes], str | None]:
    """Columns ``a0:b1`` with the two arguments ``a0:a1`` and ``b0:b1`` swapped (``swap_args``)."""
    return lambda _s, line: (line[b0:b1] + line[a1:b0] + line[a0:a1]).decode()


def _candidates(tree: ast.AST) -> Iterator[tuple[str, int, Edit]]:
    """(kind, line number, edit of that line) for every place an operator applies."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.BinOp)
            and type(node.op) in BINOP_SWAPS
            and _one_line(node)
            and node.left.end_lineno == node.lineno == node.right.lineno
        ):
            yield (
                "binop_swap",
                node.lineno,
                _swap_token(
                    node.left.end_col_offset,
                    node.right.col_offset,
                    BINOP_TEXT[type(node.op)],
                    BINOP_SWAPS[type(node.op)],
                ),
            )
        if (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and type(node.ops[0]) in COMPARE_SWAPS
            and _one_line(node)
        ):
            yield (
                "compare_swap",
                node.lineno,
                _swap_token(
                    node.left.end_col_offset, node.comparators[0].col_offset, *COMPARE_SWAPS[type(node.ops[0])]
                ),
            )
        if isinstance(node, ast.BoolOp) and len(node.values) == 2 and _one_line(node):
            old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
            yield (
                "boolop_swap",
                node.lineno,
                _swap_token(node.values[0].end_col_offset, node.values[1].col_offset, old, new),
            )
        if isinstance(node, ast.Constant) and type(node.value) is int and _one_line(node):
            for value in (node.value + 1, node.value - 1):
                if value >= 0:
                    yield (
                        "off_by_one",
                        node.lineno,
                        _rewrite(node.col_offset, node.end_col_offset, _constant(str(value))),
                    )
        if isinstance(node, (ast.If, ast.While)) and _one_line(node.test):
            test = node.test
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                invert = lambda seg, _l: seg[4:].lstrip() if seg.startswith("not ") else None  # noqa: E731
            elif isinstance(test, (ast.BoolOp, ast.IfExp, ast.NamedExpr, ast.Lambda)):
                invert = lambda seg, _l: f"not ({seg})"  # noqa: E731
            else:
                invert = lambda seg, _l: f"not {seg}"  # noqa: E731
            yield "invert_condition", test.lineno, _rewrite(test.col_offset, test.end_col_offset, invert)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and _one_line(node)
            and node.func.attr in DROPPABLE_METHODS
            and not node.args
            and not node.keywords
            and node.func.value.lineno == node.lineno
        ):
            r = node.func.value
            yield (
                "drop_call",
                node.lineno,
                _rewrite(node.col_offset, node.end_col_offset, _columns(r.col_offset, r.end_col_offset)),
            )
        if (
            isinstance(node, ast.Call)
            and len(node.args) == 2
            and not node.keywords
            and _one_line(node)
            and all(isinstance(a, SIMPLE_ARGS) for a in node.args)
        ):
            a, b = node.args
            yield (
                "swap_args",
                node.lineno,
                _rewrite(
                    a.col_offset,
                    b.end_col_offset,
                    _swapped(a.col_offset, a.end_col_offset, b.col_offset, b.end_col_offset),
                ),
            )
        if (
            isinstance(node, ast.If)
            and len(node.body) == 1
            and isinstance(node.body[0], ast.Return)
            and _one_line(node.body[0])
            and node.body[0].lineno != node.lineno
        ):
            ret = node.body[0]
            yield "drop_return", ret.lineno, _rewrite(ret.col_offset, ret.end_col_offset, lambda _s, _l: "pass")


def mutations_of(source: str, path: str) -> list[Mutation]:
    """Every distinct mutation of ``source`` (the file at repository path ``path``), in a stable order."""
    tree = ast.parse(source)
    baseline = ast.dump(tree)
    owners = _functions(tree)
    skip = _docstring_lines(tree)
    lines = source.splitlines(keepends=True)
    found: dict[tuple[int, str], Mutation] = {}
    for kind, lineno, edit in _candidates(tree):
        if lineno in skip or lineno > len(lines):
            continue
        raw = lines[lineno - 1].encode()
        new_raw = edit(raw)
        if new_raw is None or new_raw == raw:
            continue
        new_line = new_raw.decode()
        mutated = "".join(lines[: lineno - 1]) + new_line + "".join(lines[lineno:])
        try:
            if ast.dump(ast.parse(mutated)) == baseline:
                continue
        except SyntaxError:
            continue
        key = (lineno, new_line)
        if key not in found:
            found[key] = Mutation(path, lineno, lines[lineno - 1], new_line, kind, owners.get(lineno, "<module>"))
    return sorted(found.values(), key=lambda m: (m.lineno, m.kind, m.new))


def apply_mutation(source: str, mutation: Mutation) -> str:
    """``source`` with the mutation applied; the line must still read as it did when the mutation was made."""
    lines = source.splitlines(keepends=True)
    if lines[mutation.lineno - 1] != mutation.old:
        raise ValueError(f"{mutation.path}:{mutation.lineno} no longer reads {mutation.old!r}")
    lines[mutation.lineno - 1] = mutation.new
    return "".join(lines)
