"""Procedural bugs: every single-line mutation of a Python file that the operators below can make.

Each mutation replaces one source line by another, so the gold patch (the way back) is a one-line diff and the
rest of the file keeps its formatting. Operators, in the spirit of SWE-smith's procedural modifications:
operator and comparison swaps, ``and``/``or`` swaps, off-by-one integer constants, inverted conditions, dropped
string-method calls (``.strip()``...), dropped early returns and swapped call arguments. A mutation that does
not parse, or parses to the same tree, is never produced.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator

BINOP_SWAPS = {ast.Add: "-", ast.Sub: "+", ast.Mult: "//", ast.FloorDiv: "*", ast.Div: "//", ast.Mod: "//"}
BINOP_TEXT = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Div: "/", ast.Mod: "%"}
COMPARE_SWAPS = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">"),
                 ast.Eq: ("==", "!="), ast.NotEq: ("!=", "==")}
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
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def _one_line(node: ast.AST) -> bool:
    return getattr(node, "lineno", None) is not None and node.lineno == node.end_lineno


def _replace_gap(line: bytes, start: int, end: int, old: str, new: str) -> bytes | None:
    """``line`` with the first ``old`` token between byte columns ``start`` and ``end`` replaced by ``new``."""
    gap = line[start:end].decode()
    stripped = gap.strip()
    if stripped != old:
        return None
    return line[:start] + gap.replace(old, new, 1).encode() + line[end:]


def _candidates(tree: ast.AST) -> Iterator[tuple[ast.AST, str, int, int, int, str]]:
    """(node, kind, lineno, start col, end col, replacement text or '' for a gap edit)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and type(node.op) in BINOP_SWAPS and _one_line(node) \
                and node.left.end_lineno == node.lineno == node.right.lineno:
            yield node, "binop_swap", node.lineno, node.left.end_col_offset, node.right.col_offset, \
                f"{BINOP_TEXT[type(node.op)]}>{BINOP_SWAPS[type(node.op)]}"
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in COMPARE_SWAPS \
                and _one_line(node):
            old, new = COMPARE_SWAPS[type(node.ops[0])]
            yield node, "compare_swap", node.lineno, node.left.end_col_offset, node.comparators[0].col_offset, \
                f"{old}>{new}"
        if isinstance(node, ast.BoolOp) and len(node.values) == 2 and _one_line(node):
            old = "and" if isinstance(node.op, ast.And) else "or"
            new = "or" if old == "and" else "and"
            yield node, "boolop_swap", node.lineno, node.values[0].end_col_offset, node.values[1].col_offset, \
                f"{old}>{new}"
        if isinstance(node, ast.Constant) and type(node.value) is int and _one_line(node):
            for delta in (1, -1):
                if node.value + delta >= 0:
                    yield node, "off_by_one", node.lineno, node.col_offset, node.end_col_offset, \
                        f"={node.value + delta}"
        if isinstance(node, (ast.If, ast.While)) and _one_line(node.test):
            test = node.test
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                yield node, "invert_condition", test.lineno, test.col_offset, test.end_col_offset, "=<unnot>"
            else:
                wrap = isinstance(test, (ast.BoolOp, ast.IfExp, ast.NamedExpr, ast.Lambda))
                yield node, "invert_condition", test.lineno, test.col_offset, test.end_col_offset, \
                    "=<not(>" if wrap else "=<not>"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in DROPPABLE_METHODS and not node.args and not node.keywords and _one_line(node):
            receiver = node.func.value
            if receiver.lineno == node.lineno:
                yield node, "drop_call", node.lineno, node.col_offset, node.end_col_offset, \
                    f"=<receiver:{receiver.col_offset}:{receiver.end_col_offset}>"
        if isinstance(node, ast.Call) and len(node.args) == 2 and not node.keywords and _one_line(node) \
                and all(isinstance(a, SIMPLE_ARGS) for a in node.args):
            a, b = node.args
            yield node, "swap_args", node.lineno, a.col_offset, b.end_col_offset, \
                f"=<swap:{a.end_col_offset}:{b.col_offset}>"
        if isinstance(node, ast.If) and len(node.body) == 1 and isinstance(node.body[0], ast.Return) \
                and _one_line(node.body[0]) and node.body[0].lineno != node.lineno:
            ret = node.body[0]
            yield ret, "drop_return", ret.lineno, ret.col_offset, ret.end_col_offset, "=pass"


def _apply(line: bytes, start: int, end: int, spec: str) -> bytes | None:
    if not spec.startswith("="):  # a gap edit: "old>new"
        old, new = spec.split(">", 1)
        return _replace_gap(line, start, end, old, new)
    new = spec[1:]
    segment = line[start:end].decode()
    if new == "<unnot>":
        if not segment.startswith("not "):
            return None
        new = segment[4:].lstrip()
    elif new == "<not>":
        new = f"not {segment}"
    elif new == "<not(>":
        new = f"not ({segment})"
    elif new.startswith("<receiver:"):
        r_start, r_end = (int(x) for x in new[len("<receiver:"):-1].split(":"))
        new = line[r_start:r_end].decode()
    elif new.startswith("<swap:"):
        a_end, b_start = (int(x) for x in new[len("<swap:"):-1].split(":"))
        first, sep, second = line[start:a_end], line[a_end:b_start], line[b_start:end]
        new = (second + sep + first).decode()
    return line[:start] + new.encode() + line[end:]


def mutations_of(source: str, path: str) -> list[Mutation]:
    """Every distinct mutation of ``source`` (the file at repository path ``path``), in a stable order."""
    tree = ast.parse(source)
    baseline = ast.dump(tree)
    owners = _functions(tree)
    skip = _docstring_lines(tree)
    lines = source.splitlines(keepends=True)
    found: dict[tuple[int, str], Mutation] = {}
    for node, kind, lineno, start, end, spec in _candidates(tree):
        if lineno in skip or lineno > len(lines):
            continue
        raw = lines[lineno - 1].encode()
        new_raw = _apply(raw, start, end, spec)
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
