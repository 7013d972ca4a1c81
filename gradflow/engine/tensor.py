"""A node of the tape, and what the sweep does to a rule's gradient before passing it on.

``unbroadcast`` is the one place where broadcasting is undone; ``fit`` also casts a
contribution back to its input's dtype. Both keep ``rows`` leading axes for the walk
that sweeps many seeds at once (``engine.rows``).
"""

from __future__ import annotations

import math
from types import MappingProxyType


class Tensor:
    """One node of the tape: a leaf (op is None) or the result of an op."""

    __slots__ = ("tape", "index", "op", "parents", "attrs", "shape", "dtype",
                 "value", "requires_grad", "meta")

    def __init__(self, tape, op, parents, attrs, shape, dtype, value, requires_grad, meta):
        self.tape = tape
        self.index = len(tape.nodes)
        self.op = op
        self.parents = parents
        self.attrs = attrs
        self.shape = shape
        self.dtype = dtype
        self.value = value
        self.requires_grad = requires_grad
        self.meta = meta
        tape.nodes.append(self)

    def __repr__(self) -> str:
        what = self.op.name if self.op else "leaf"
        return f"Tensor(#{self.index} {what} shape={list(self.shape)} {self.dtype})"

    @property
    def size(self) -> int:
        return math.prod(self.shape)   # exact Python ints: no overflow, and no numpy call per node

    # Operators, for writing engine code and tests the way one writes numpy.
    def __add__(self, other): return self.tape.apply("add", self, other)
    def __radd__(self, other): return self.tape.apply("add", other, self)
    def __sub__(self, other): return self.tape.apply("sub", self, other)
    def __rsub__(self, other): return self.tape.apply("sub", other, self)
    def __mul__(self, other): return self.tape.apply("mul", self, other)
    def __rmul__(self, other): return self.tape.apply("mul", other, self)
    def __truediv__(self, other): return self.tape.apply("div", self, other)
    def __rtruediv__(self, other): return self.tape.apply("div", other, self)
    def __pow__(self, other): return self.tape.apply("pow", self, other)
    def __matmul__(self, other): return self.tape.apply("matmul", self, other)
    def __neg__(self): return self.tape.apply("neg", self)
    def __getitem__(self, index): return self.tape.apply("getitem", self, index=index)


new_object = object.__new__
NO_ATTRS = MappingProxyType({})


def values_of(parents) -> tuple:
    """The parents' values; unrolled for one or two parents, the usual case on the hot path."""
    n = len(parents)
    if n == 1:
        return (parents[0].value,)
    if n == 2:
        return (parents[0].value, parents[1].value)
    return tuple([p.value for p in parents])


def unbroadcast(grad, shape, rows: int = 0):
    """Sum a gradient back down to the shape of the input it belongs to.

    The one place where broadcasting is undone: op rules return gradients in
    the broadcast shape and never call this themselves. ``rows`` leading axes
    (a gradient per seed, as ``engine.rows`` stacks them) are kept as they are.
    """
    if grad.shape[rows:] == shape:
        return grad
    extra = grad.ndim - rows - len(shape)
    if extra:
        grad = grad.sum(axis=tuple(range(rows, rows + extra)))
    squeezed = tuple(rows + i for i, n in enumerate(shape) if n == 1 and grad.shape[rows + i] != 1)
    if squeezed:
        grad = grad.sum(axis=squeezed, keepdims=True)
    return grad


def fit(contrib, parent: Tensor, rows: int = 0):
    """A rule's contribution in its input's dtype and shape (``rows`` leading axes kept): what
    the sweep does to each one but a fitted op's (already so)."""
    if contrib.dtype is not parent.dtype:   # float32 * an int input gives float64: cast back
        contrib = contrib.astype(parent.dtype)
    return unbroadcast(contrib, parent.shape, rows)
