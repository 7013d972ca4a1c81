"""Typed, located values out of the YAML Node tree: what every section of a model reads.

A `Reader` turns a Node into a mapping, list, integer, string, name or source place, or
raises a ModelError at the node that is not one; the functions below read plain values
out of Node trees and say what kind of value a node holds.
"""

from __future__ import annotations

import os
import re

from gradflow.engine import ALIASES, OPS
from gradflow.errors import ModelError, did_you_mean
from gradflow.model.source import Node
from gradflow.model.spec import Place

SOURCE = r"(?s)(?P<file>.+):(?P<line>[0-9]+):(?P<col>[0-9]+)\Z"   # compiled on first use
RESERVED = set(OPS) | set(ALIASES) | {"repeat", "split", "chunk", "True", "False", "None"}


class Reader:
    """Reads one file's nodes; ``defined`` holds every global name and where it was defined."""

    def __init__(self, path: str):
        self.path = path
        self.defined: dict[str, Place] = {}
        self.source: Place | None = None      # the top-level `source:`, once read

    def fail(self, message: str, at) -> ModelError:
        line, col = (at.line, at.col) if hasattr(at, "line") else at
        return ModelError(message, self.path, line, col)

    def mapping(self, node: Node, what: str, allowed=None) -> dict:
        if not isinstance(node.value, dict):
            raise self.fail(f"{what} must be a mapping, not {kind_of(node.value)}", node)
        for key in node.value if allowed is not None else ():
            if key not in allowed:
                raise self.fail(f"unknown key {key!r} in {what}{did_you_mean(key, allowed)}",
                                node.keys[key])
        return node.value

    def sequence(self, node: Node, what: str) -> list:
        if isinstance(node.value, str):   # a single name stands for a list of one
            return [node]
        if not isinstance(node.value, list):
            raise self.fail(f"{what} must be a list, not {kind_of(node.value)}", node)
        return node.value

    def integer(self, node: Node, what: str, low=None, high=None) -> int:
        v = node.value
        if not isinstance(v, int) or isinstance(v, bool):
            raise self.fail(f"{what} must be an integer, not {kind_of(v)}", node)
        if low is not None and v < low:
            raise self.fail(f"{what} must be at least {low}, got {v}", node)
        if high is not None and v > high:
            raise self.fail(f"{what} must be at most {high}, got {v}", node)
        return v

    def string(self, node: Node, what: str) -> str:
        if not isinstance(node.value, str):
            raise self.fail(f"{what} must be a string, not {kind_of(node.value)}", node)
        return node.value

    def name(self, name: str, at, what: str, scope: dict | None = None) -> str:
        if not is_name(name) or "__" in name:
            raise self.fail(f"{what} {name!r} is not a valid name (dotted identifiers such as enc.w or "
                            "G.0.weight)", at)
        if name in RESERVED:
            raise self.fail(f"{what} {name!r} has the name of an op; choose another name", at)
        scope = self.defined if scope is None else scope
        if name in scope:
            first = scope[name]
            raise self.fail(f"{name!r} is defined twice (first at line {first.line})", at)
        scope[name] = place_of(at)
        return name

    def source_place(self, node: Node) -> Place:
        """``PATH:LINE:COL`` of the code that made something (an imported model's Python line).
        PATH is relative to the model file's folder unless absolute; it is kept as the
        current directory sees it, relative where it is inside it."""
        match = re.match(SOURCE, node.value) if isinstance(node.value, str) else None
        if match is None or int(match["line"]) < 1 or int(match["col"]) < 1:
            raise self.fail(f"source must be PATH:LINE:COL (a 1-based line and column), "
                            f"not {kind_of(node.value)}", node)
        return Place(int(match["line"]), int(match["col"]), shown_path(match["file"], self.path))


def shown_path(path: str, model_path: str) -> str:
    """A source path as reports show it: resolved against the model file's folder, then
    relative to the current directory when it is inside it."""
    if not os.path.isabs(path):
        path = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(model_path)), path))
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def is_name(text: str) -> bool:
    """A name: ASCII identifiers joined by dots, where a segment after the first may be an
    integer (`G.0.weight`, as PyTorch names it). Read without a pattern, whose compiling
    would cost every start-up more than all the names of a model take to read."""
    if not text.isascii():
        return False
    if text.isidentifier():   # most names
        return True
    first, *rest = text.split(".")
    if not first.isidentifier():
        return False
    for segment in rest:
        if not (segment.isidentifier() or segment.isdigit()):
            return False
    return True


def place_of(at) -> Place:
    if isinstance(at, Place):
        return at
    if isinstance(at, tuple):
        return Place(*at)
    return Place(at.line, at.col)


def kind_of(value) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: f"the string {value!r}", bool: f"{value}".lower()
            }.get(type(value), f"the number {value!r}")


def plain(node: Node):
    """The plain Python value of a node tree (lists and scalars; used for `value:`)."""
    stack, root = [(node, None, None)], []
    while stack:
        current, parent, slot = stack.pop()
        v = current.value
        if isinstance(v, list):
            out = [None] * len(v)
            stack.extend((child, out, i) for i, child in enumerate(v))
        else:
            out = v
        if parent is None:
            root.append(out)
        else:
            parent[slot] = out
    return root[0]


def first_leaf(node: Node, bad) -> Node | None:
    """The first scalar of a node tree, in file order, whose value is ``bad``: where to point."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current.value, list):
            stack.extend(reversed(current.value))
        elif bad(current.value):
            return current
    return None
