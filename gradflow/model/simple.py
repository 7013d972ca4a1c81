"""The two commonest shapes of graph expression, read without Python's parser.

Most lines of a model are an op applied to one operand (``tanh(h)``,
``constant(0.9)``) or one operator between two operands (``h * w``,
``state @ actor.w``). ``ast.parse`` plus the allowlist walk costs tens of
microseconds per line; one regular expression and three nodes cost a few.
``parse_simple`` builds exactly the tree the general path in ``expr.py`` builds
(same nodes, same file places, same walk order) and returns None for any other
text, including all text the general path would refuse, which then takes the
general path and is told what is wrong. tests/model/test_simple.py holds both
paths to the same answers.
"""

from __future__ import annotations

import ast
import keyword
import re

from gradflow.model.spec import Place

MAX_CHARS = 200    # longer text is rarely this simple, and the general path bounds it
NAME = r"[A-Za-z_][A-Za-z0-9_]*"
# A plain decimal number: no exponent, no '_', not so long it is slow.
NUMBER = r"[0-9]{1,15}\.[0-9]{1,15}|[1-9][0-9]{0,17}|0"
OPERAND = rf"({NAME}(?:\.{NAME})*|{NUMBER})"   # or a dotted name
CALL = re.compile(rf"({NAME})\({OPERAND}\)")
BINARY = re.compile(rf"{OPERAND} *(\*\*|[-+*/@]) *{OPERAND}")
# An init: a name alone (``zeros``) or called on numbers and dim names (``normal(0.0, 0.02)``,
# ``randint(0, classes)``), one space after each comma. Compiled on first use (re's cache):
# a model without init: lines never pays for it at start-up.
INIT_ARG = rf"-?(?:{NUMBER})|{NAME}"
INIT = rf"({NAME})(?:\(((?:{INIT_ARG})(?:, (?:{INIT_ARG}))*)\))?"
OPERATORS = {"+": ast.Add, "-": ast.Sub, "*": ast.Mult, "/": ast.Div, "**": ast.Pow, "@": ast.MatMult}
KEYWORDS = frozenset(keyword.kwlist)   # True, None, lambda, if ...: never names
LOAD = ast.Load()


def parse_simple(text: str, origin: Place, quoted: bool):
    """The checked tree of ``f(a)`` or ``a OP b`` on one line, or None for any other text."""
    if len(text) > MAX_CHARS or "__" in text:   # short(text), inline: this runs once per graph line
        return None
    line, col = origin.line, origin.col + int(quoted)
    found = CALL.fullmatch(text)
    if found is not None:
        func, arg = found.group(1), operand(found, 2, line, col)
        if func in KEYWORDS or arg is None:
            return None
        name = located(ast.Name(func, LOAD), line, col, len(func))
        tree = located(ast.Call(name, [arg[0]], []), line, col, len(text))
        tree.gradflow_nodes = [tree, *arg[1], name]
        return tree
    found = BINARY.fullmatch(text)
    if found is not None:
        left, right = operand(found, 1, line, col), operand(found, 3, line, col)
        if left is None or right is None:
            return None
        tree = located(ast.BinOp(left[0], OPERATORS[found.group(2)](), right[0]), line, col, len(text))
        tree.gradflow_nodes = [tree, *right[1], *left[1]]
        return tree
    return None


def operand(found: re.Match, group: int, line: int, col: int):
    """(node, its nodes in the order expr.flatten walks them) for a matched operand; None
    when a part of a name is a Python keyword."""
    text, start = found.group(group), found.start(group)
    if "." not in text and not text[0].isdigit():   # a plain name, the usual operand
        if text in KEYWORDS:
            return None
        node = located(ast.Name(text, LOAD), line, col + start, found.end(group))
        return node, (node,)
    if text[0].isdigit():
        node = located(ast.Constant(number(text), None), line, col + start, found.end(group))
        return node, (node,)
    parts = text.split(".")
    if not KEYWORDS.isdisjoint(parts):
        return None
    end = start + len(parts[0])
    node = located(ast.Name(parts[0], LOAD), line, col + start, end)
    order = [node]
    for part in parts[1:]:   # a.b.c is Attribute(Attribute(Name a, b), c): parents first
        end += 1 + len(part)
        node = located(ast.Attribute(node, part, LOAD), line, col + start, end)
        order.append(node)
    order.reverse()
    return node, order


def located(node, line: int, col: int, end: int):
    """The positions the general path leaves on a node: its start as a file place (as
    ``expr.relocate`` makes it), its end as the parser's offset in the one-line text."""
    node.lineno = line
    node.col_offset = col
    node.end_lineno = 1
    node.end_col_offset = end
    return node


def parse_simple_init(text: str):
    """(name, args) of an init written as ``name`` or ``name(a, b)`` with numbers and dim
    names as arguments, as ``expr.parse_init`` reads them from the tree; None for other text."""
    found = re.fullmatch(INIT, text) if short(text) else None
    if found is None or found.group(1) in KEYWORDS:
        return None
    args = []
    for arg in found.group(2).split(", ") if found.group(2) else ():
        if arg[0] == "-" or arg[0].isdigit():   # -x is the negated number, as the tree has it
            args.append(number(arg))
        elif arg in KEYWORDS:
            return None
        else:
            args.append(arg)
    return found.group(1), tuple(args)


def short(text: str) -> bool:
    """Whether text may be simple at all: longer text, or a dunder, is left to the general
    path, which says what is wrong."""
    return len(text) <= MAX_CHARS and "__" not in text


def number(text: str) -> int | float:
    """The value of a matched number, as the parser reads it (a '.' makes it a float)."""
    return float(text) if "." in text else int(text)
