"""One aten call as its handler sees it, and what a handler may return.

A handler gets a ``Call`` (the node's arguments as expression text or Python
values, its output shape) and returns the expression, an ``Alias`` (the node is
another name: clone, contiguous) or a ``Parts`` (one expression per output, for
split and max). A value read several times (an unrolled recurrent layer's state)
a handler writes as a graph line of its own with ``c.line``, which gives its name.
``Unsupported`` says why an op, or one use of it, has no exact gradflow
equivalent; the importer turns it into an error at the user's line.
"""

from __future__ import annotations

from dataclasses import dataclass


class Unsupported(Exception):
    """This call has no exact gradflow equivalent (the message says what is missing)."""


@dataclass
class Alias:
    """The call's output is another name for this tensor (clone, contiguous)."""
    name: str


@dataclass
class Parts:
    """One expression per output of the call (split, max with indices)."""
    exprs: list


@dataclass
class Call:
    """One aten call: its arguments (names of tensors as text, other values as Python values)."""
    args: list
    kwargs: dict
    shape: tuple                     # output shape (first output for several)
    shapes: list                     # input shapes by position (None for non-tensors)
    overload: str
    kinds: dict = None               # argument position or keyword -> "float", "int", "bool" or None
    kind: str = "float"              # the output's kind
    line: object = None              # (expr, suffix) -> name of a new graph line <node>_<suffix> at the call's place

    def arg(self, i: int, name: str, default=None):
        if i < len(self.args):
            return self.args[i]
        return self.kwargs.get(name, default)

    def ndim(self, i: int = 0) -> int:
        return len(self.shapes[i])


def text(value) -> str:
    """A Python value as gradflow expression text."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, float):
        if value != value:
            raise Unsupported("with a NaN constant")
        if value in (float("inf"), float("-inf")):
            # gradflow expressions have no infinity; a huge finite number masks the same way
            return "1e300" if value > 0 else "-1e300"
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(text(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


def unary(op: str):
    """The handler of an aten op that is gradflow's op ``op`` of its one tensor."""
    return lambda c: f"{op}({c.args[0]})"


def operand(value) -> str:
    """A Python value as an operand of an op: an infinity is one (log(0.0)), so a softmax over only
    -inf is nan as in torch; attributes (clip's bounds) take ``text``'s large finite numbers."""
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "(-log(0.0))" if value > 0 else "log(0.0)"
    return text(value)


def axes(dims, ndim: int):
    """A dim or list of dims -> an axis attribute text (one int or a tuple)."""
    if dims is None or dims == []:
        return None
    if isinstance(dims, int):
        return str(dims)
    return text(tuple(d % ndim for d in dims))


def reduced_over(op: str, x: str, axis, keep, ties: str | None = None) -> str:
    """op(x) over an axis text (None: every axis), keeping the reduced axes or not; max and min
    given ``ties``: amax, amin, max() and min() share a tie's gradient ("split"), where
    max(x, dim) gives it to the index it returns (gradflow's default)."""
    more = "" if ties is None else f", ties={ties!r}"
    if axis is None and not keep:
        return f"{op}({x}{more})"
    return f"{op}({x}, axis={axis}, keepdims={keep}{more})"


def shape_text(shape) -> str:
    return "[" + ", ".join(str(int(n)) for n in shape) + "]"


def index_text(ndim: int, dim: int, item: str) -> str:
    return "[" + ", ".join([":"] * (dim % ndim) + [item]) + "]"
