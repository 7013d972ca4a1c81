"""Dims: named sizes, each an integer or an integer expression of other dims.

``d_head: d_model // heads`` is parsed with ``ast`` and an allowlist (names, integers,
``+ - * //``, unary minus, parentheses), never evaluated by Python. Expressions are
evaluated after ``--dim`` overrides, so overriding ``d_model`` moves ``d_head`` with
it. A cycle, an unknown dim, a non-integer or a non-positive result is an error at
the dim's place.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from gradflow.errors import ModelError, did_you_mean
from gradflow.model.spec import Place

LIMIT = 2 ** 62          # beyond any real size; keeps the arithmetic in plain machine integers
OPERATORS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
             ast.FloorDiv: lambda a, b: a // b}


@dataclass(eq=False, repr=False)
class DimExpr:
    """A dim written as an expression of other dims."""
    text: str
    tree: ast.expr


def parse_dim(text: str, path: str, place: Place) -> DimExpr:
    """Check a dim expression; anything outside the allowlist is an error at ``place``."""
    def fail(message):
        return ModelError(f"dim expression {text!r}: {message}", path, place.line, place.col)
    if len(text) > 1000:
        raise fail("longer than 1000 characters")
    if not text.isascii():   # Python's parser would read a full-width 'ｎ' as the dim n
        raise fail("dim names and operators are ASCII")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise fail("not an integer expression of dims (+ - * // and parentheses)") from None
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            stack += [node.left, node.right]
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            stack.append(node.operand)
        elif isinstance(node, ast.Name):
            continue
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            if node.value >= LIMIT:
                raise fail(f"{node.value} is too large")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            raise fail("'/' gives a fraction: use '//' for whole sizes")
        else:
            raise fail("only dim names, whole numbers, + - * // and parentheses are allowed")
    return DimExpr(text, tree)


def resolve(declared: dict, outer: dict, path: str, what: str) -> dict:
    """{name: int} for ``declared`` ({name: (int | DimExpr, Place)}), whose expressions may
    name each other and the dims of ``outer`` ({name: int}); returns outer and declared."""
    values = dict(outer)
    values.update({name: value for name, (value, _) in declared.items() if isinstance(value, int)})
    state: dict[str, str] = {}
    for name in declared:
        evaluate(name, declared, values, state, path, what)
    return values


def evaluate(start: str, declared: dict, values: dict, state: dict, path: str, what: str) -> None:
    """Evaluate one dim and what it needs first (iteratively: chains of dims may be long)."""
    stack = [start]
    while stack:
        name = stack[-1]
        value, place = declared[name]
        if name in values and (isinstance(value, int) or state.get(name) == "done"):
            stack.pop()
            continue
        state[name] = "open"
        needed = [n.id for n in ast.walk(value.tree) if isinstance(n, ast.Name)
                  and n.id in declared and state.get(n.id) != "done" and not isinstance(declared[n.id][0], int)]
        for other in needed:
            if state.get(other) == "open":
                cycle = " -> ".join(stack[stack.index(other):] + [other])
                raise ModelError(f"{what}: the dims depend on each other in a cycle ({cycle})",
                                 path, place.line, place.col)
        if needed:
            stack.extend(needed)
            continue
        values[name] = compute(value, values, path, place, name, what)
        state[name] = "done"
        stack.pop()


def compute(expr: DimExpr, values: dict, path: str, place: Place, name: str, what: str) -> int:
    def fail(message):
        return ModelError(f"{what}: dim {name!r} = {expr.text}: {message}", path, place.line, place.col)

    def value_of(node) -> int:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in values:
                raise fail(f"unknown dim {node.id!r}{did_you_mean(node.id, values)}")
            return values[node.id]
        if isinstance(node, ast.UnaryOp):
            operand = value_of(node.operand)
            return -operand if isinstance(node.op, ast.USub) else operand
        left, right = value_of(node.left), value_of(node.right)
        if isinstance(node.op, ast.FloorDiv) and right == 0:
            raise fail("division by zero")
        result = OPERATORS[type(node.op)](left, right)
        if abs(result) >= LIMIT:
            raise fail("the size is too large")
        return result
    result = value_of(expr.tree)
    if result < 1:
        raise fail(f"a dim must be a positive integer, got {result}")
    return result
