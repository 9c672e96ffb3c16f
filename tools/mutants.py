"""The faults :mod:`mutate` plants, one per mutant: where each can go in
a module's syntax tree, and the module's source with one planted
(docstrings and annotations left alone; a fault that leaves the source
unchanged is no mutant)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

FLIPPED: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
SWAPPED_CALLS = {"min": "max", "max": "min", "any": "all", "all": "any"}


@dataclass(frozen=True)
class Fault:
    """One fault: the ``index``-th node of an ``ast.walk`` of the
    module, what is done to it, and (for a comparison) which operator."""

    index: int
    kind: str
    operator: int = 0


def _left_alone(tree: ast.AST) -> set[int]:
    """The ids of docstring constants and of annotation nodes."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            ids.add(id(body[0].value))
        for field in ("annotation", "returns"):
            annotation = getattr(node, field, None)
            if annotation is not None:
                ids.update(id(n) for n in ast.walk(annotation))
    return ids


def faults(tree: ast.AST) -> Iterator[Fault]:
    skip = _left_alone(tree)
    for index, node in enumerate(ast.walk(tree)):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare):
            for k, op in enumerate(node.ops):
                if type(op) in FLIPPED:
                    yield Fault(index, "compare", k)
        elif isinstance(node, ast.BoolOp):
            yield Fault(index, "and-or")
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield Fault(index, "not")
        elif isinstance(node, ast.BinOp) and isinstance(
            node.op, (ast.Add, ast.Sub)
        ):
            yield Fault(index, "plus-minus")
        elif isinstance(node, ast.Constant) and type(node.value) in (
            bool,
            int,
        ):
            yield Fault(index, "constant")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in SWAPPED_CALLS
        ):
            yield Fault(index, "call")
        elif isinstance(node, ast.If):
            yield Fault(index, "if-true")
            yield Fault(index, "if-false")
        elif isinstance(node, ast.Return) and not _returns_none(node):
            yield Fault(index, "return-none")


def _returns_none(node: ast.Return) -> bool:
    value = node.value
    return value is None or (
        isinstance(value, ast.Constant) and value.value is None
    )


class _Unwrap(ast.NodeTransformer):
    """``not x`` -> ``x`` for the one node given."""

    def __init__(self, target: ast.UnaryOp) -> None:
        self.target = target

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        return node.operand if node is self.target else node


def planted(source: str, fault: Fault) -> tuple[str, int]:
    """The module's source with ``fault`` planted, and its line."""
    tree = ast.parse(source)
    node = list(ast.walk(tree))[fault.index]
    line = getattr(node, "lineno", 0)
    if isinstance(node, ast.Compare):
        node.ops[fault.operator] = FLIPPED[type(node.ops[fault.operator])]()
    elif isinstance(node, ast.BoolOp):
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif isinstance(node, ast.UnaryOp):
        tree = _Unwrap(node).visit(tree)
    elif isinstance(node, ast.BinOp):
        node.op = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
    elif isinstance(node, ast.Constant):
        value = node.value
        assert isinstance(value, int)  # bool or int (see faults)
        node.value = (not value) if isinstance(value, bool) else value + 1
    elif isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        node.func.id = SWAPPED_CALLS[node.func.id]
    elif isinstance(node, ast.If):
        node.test = ast.Constant(fault.kind == "if-true")
    elif isinstance(node, ast.Return):
        node.value = ast.Constant(None)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree), line


def mutants(source: str) -> list[tuple[Fault, str, int]]:
    """Every fault that changes the source: (fault, source, line)."""
    unchanged = ast.unparse(ast.parse(source))
    found = []
    for fault in faults(ast.parse(source)):
        text, line = planted(source, fault)
        if text != unchanged:
            found.append((fault, text, line))
    return found
