"""OPS: the one table of operations. An op is one entry, nothing more.

Each entry gives the forward (on numpy arrays), one vector-Jacobian product per
tensor input (``None``: no gradient ever passes through that input), a shape
rule that works on shapes alone (so models far larger than memory can still be
checked), the output dtype and a one-line doc. ``gradflow ops`` prints this table.

A vjp is called as ``vjp(g, ans, *inputs, **attrs)`` and returns the gradient for
its input in the *broadcast* shape; the tape sums it back to the input's shape.
Static arguments (``axis``, ``keepdims``, ``slope``, an index) are attributes,
never tensors, and carry no gradient.

kinds: ``differentiable``; ``stop`` (explicit stop-gradient, identity forward);
``implicit`` (non-differentiable op: every input is cut).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from gradflow.errors import ShapeError

REQUIRED = object()  # marks an attribute with no default


@dataclass(frozen=True)
class Op:
    name: str
    group: str
    inputs: tuple[str, ...]          # tensor arguments; ("*xs",) for a list of tensors
    forward: Callable
    vjps: tuple                      # one rule per input (variadic: one rule taking index=)
    shape: Callable                  # shape(*input_shapes, **attrs) -> output shape
    doc: str
    attrs: dict = field(default_factory=dict)   # static arguments -> default (or REQUIRED)
    kind: str = "differentiable"
    out: str = "promote"             # output dtype: promote | float | int | first
    int_inputs: tuple[int, ...] = ()  # inputs that must be integer tensors

    @property
    def variadic(self) -> bool:
        return self.inputs[:1] == ("*xs",)

    def bind_attrs(self, given: dict) -> dict:
        """Complete ``given`` with defaults; unknown or missing attributes raise TypeError."""
        unknown = set(given) - set(self.attrs)
        if unknown:
            raise TypeError(f"{self.name}() got an unexpected argument {sorted(unknown)[0]!r}")
        bound = {**self.attrs, **given}
        missing = [k for k, v in bound.items() if v is REQUIRED]
        if missing:
            raise TypeError(f"{self.name}() is missing argument {missing[0]!r}")
        return bound

    def vjps_for(self, n_inputs: int) -> tuple:
        if not self.variadic:
            return self.vjps
        rule = self.vjps[0]
        return tuple(None if rule is None else functools.partial(rule, index=k) for k in range(n_inputs))

    def check_dtypes(self, dtypes) -> None:
        for k in self.int_inputs:
            if dtype_kind(dtypes[k]) != "i":
                raise ShapeError(f"{self.name}: argument {self.inputs[k]!r} must be an integer tensor, "
                                 f"got {np.dtype(dtypes[k]).name}")

    def out_dtype(self, dtypes, float_dtype) -> np.dtype:
        if self.out == "float" or (self.out == "promote" and any(dtype_kind(d) == "f" for d in dtypes)):
            return np.dtype(float_dtype)
        if self.out == "first":
            return np.dtype(dtypes[0])
        return np.dtype(np.int64)


def dtype_kind(dtype) -> str:
    """'f' for floating dtypes, 'i' for integer (and bool) ones, '' for None."""
    if dtype is None:
        return ""
    return "f" if np.dtype(dtype).kind == "f" else "i"


OPS: dict[str, Op] = {}
ALIASES = {"detach": "stop_gradient"}


def resolve_op(name: str) -> Op:
    return OPS[ALIASES.get(name, name)]


def defop(name, group, inputs, forward, vjps, shape, doc, **kw) -> None:
    OPS[name] = Op(name, group, tuple(inputs), forward, tuple(vjps), shape, doc, **kw)


# ---------------------------------------------------------------- shape rules
def fmt(shape) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def same_shape(x, **_):
    return x


def broadcast_shape(*shapes):
    """numpy's broadcasting rule on shapes alone."""
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(-ndim, 0):
        sizes = {s[i] for s in shapes if len(s) >= -i} - {1}
        if len(sizes) > 1:
            raise ShapeError("cannot broadcast " + " and ".join(fmt(s) for s in shapes))
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def norm_axes(axis, ndim, shape=None) -> tuple[int, ...]:
    """Normalise an axis attribute (None, int or sequence, negatives allowed) to a sorted tuple."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not isinstance(a, int) or isinstance(a, bool) or not -ndim <= a < ndim:
            raise ShapeError(f"axis {a} is out of range for shape {fmt(shape or ())}")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated axis in {axis}")
    return tuple(sorted(out))


def reduce_shape(x, axis=None, keepdims=False, **_):
    axes = norm_axes(axis, len(x), x)
    if keepdims:
        return tuple(1 if i in axes else n for i, n in enumerate(x))
    return tuple(n for i, n in enumerate(x) if i not in axes)


def matmul_shape(a, b):
    if not a or not b:
        raise ShapeError(f"matmul of {fmt(a)} and {fmt(b)}: operands must have at least one axis")
    aa = (1,) + a if len(a) == 1 else a
    bb = b + (1,) if len(b) == 1 else b
    if aa[-1] != bb[-2]:
        raise ShapeError(f"matmul of {fmt(a)} and {fmt(b)}: {aa[-1]} != {bb[-2]}")
    try:
        batch = broadcast_shape(aa[:-2], bb[:-2])
    except ShapeError:
        raise ShapeError(f"matmul of {fmt(a)} and {fmt(b)}: batch axes do not broadcast") from None
    return batch + aa[-2:-1] * (len(a) > 1) + bb[-1:] * (len(b) > 1)


def index_shape(x, index=(), **_):
    """Shape of ``x[index]`` for basic indexing, from a zero-stride stand-in (no memory)."""
    stand_in = as_strided(np.zeros(1, dtype=np.int8), shape=x, strides=(0,) * len(x))
    try:
        return stand_in[index].shape
    except IndexError as e:
        raise ShapeError(f"index {format_index(index)} does not fit shape {fmt(x)}: {e}") from None


def format_index(index) -> str:
    def one(i):
        if i is None:
            return "None"
        if i is Ellipsis:
            return "..."
        if isinstance(i, slice):
            parts = ["" if v is None else str(v) for v in (i.start, i.stop, i.step)]
            return ":".join(parts[:2] if i.step is None else parts)
        return str(i)
    items = index if isinstance(index, tuple) else (index,)
    return "[" + ", ".join(one(i) for i in items) + "]"


# ---------------------------------------------------------------- helpers for rules
def expand_reduced(g, ndim, axis, keepdims):
    """Give a reduction's gradient back the axes the reduction removed."""
    return g if keepdims else np.expand_dims(g, norm_axes(axis, ndim))


def first_extreme_mask(x, axis, pick):
    """A 0/1 mask of the first arg-max (pick=np.argmax) or arg-min over the axes."""
    axes = norm_axes(axis, x.ndim)
    moved = np.moveaxis(x, axes, range(x.ndim - len(axes), x.ndim))
    flat = moved.reshape(moved.shape[:x.ndim - len(axes)] + (-1,))
    hit = np.zeros(flat.shape, dtype=bool)
    np.put_along_axis(hit, pick(flat, axis=-1)[..., None], True, axis=-1)
    return np.moveaxis(hit.reshape(moved.shape), range(x.ndim - len(axes), x.ndim), axes)


def reduce_extreme_vjp(pick):
    def vjp(g, ans, x, axis=None, keepdims=False):
        return expand_reduced(g, x.ndim, axis, keepdims) * first_extreme_mask(x, axis, pick)
    return vjp


def getitem_vjp(g, ans, x, index=()):
    out = np.zeros(x.shape, dtype=g.dtype)
    out[index] = g  # basic indexing never repeats an element, so assignment suffices
    return out


def matmul_vjp_a(g, ans, a, b):
    if b.ndim == 1:
        return g[..., None] * b
    if a.ndim == 1:
        return (b @ g[..., None])[..., 0]
    return g @ np.swapaxes(b, -1, -2)


def matmul_vjp_b(g, ans, a, b):
    if a.ndim == 1 and b.ndim == 1:
        return g * a
    if a.ndim == 1:
        return a[:, None] * g[..., None, :]
    if b.ndim == 1:
        return a * g[..., None]
    return np.swapaxes(a, -1, -2) @ g


def pow_vjp_exponent(g, ans, a, b):
    # d(a**b)/db = a**b * log(a); 0 where a <= 0, as PyTorch does where the result is 0.
    return g * ans * np.log(np.where(a > 0, a, 1))


def sigmoid(x):
    return np.exp(-np.logaddexp(0, -x))  # no overflow for large |x|


# ================================================================ arithmetic
_BIN = dict(group="arithmetic", inputs=("a", "b"), shape=broadcast_shape)
defop("add", forward=np.add, vjps=(lambda g, ans, a, b: g, lambda g, ans, a, b: g),
      doc="a + b", **_BIN)
defop("sub", forward=np.subtract, vjps=(lambda g, ans, a, b: g, lambda g, ans, a, b: -g),
      doc="a - b", **_BIN)
defop("mul", forward=np.multiply, vjps=(lambda g, ans, a, b: g * b, lambda g, ans, a, b: g * a),
      doc="a * b", **_BIN)
defop("div", forward=np.divide,
      vjps=(lambda g, ans, a, b: g / b, lambda g, ans, a, b: -g * ans / b),
      doc="a / b", out="float", **_BIN)
defop("pow", forward=np.power,
      vjps=(lambda g, ans, a, b: g * b * a ** np.where(b == 0, 1, b - 1), pow_vjp_exponent),
      doc="a ** b", **_BIN)
defop("matmul", "arithmetic", ("a", "b"), np.matmul, (matmul_vjp_a, matmul_vjp_b), matmul_shape,
      "a @ b: matrix product, batched over leading axes (numpy rules)")
defop("neg", "arithmetic", ("x",), np.negative, (lambda g, ans, x: -g,), same_shape, "-x")

# ================================================================ elementwise
_EW = dict(group="elementwise", inputs=("x",), shape=same_shape, out="float")
defop("exp", forward=np.exp, vjps=(lambda g, ans, x: g * ans,), doc="e ** x", **_EW)
defop("log", forward=np.log, vjps=(lambda g, ans, x: g / x,), doc="natural logarithm", **_EW)
defop("tanh", forward=np.tanh, vjps=(lambda g, ans, x: g * (1 - ans * ans),),
      doc="hyperbolic tangent", **_EW)
defop("sigmoid", forward=sigmoid, vjps=(lambda g, ans, x: g * ans * (1 - ans),),
      doc="1 / (1 + e ** -x), computed without overflow", **_EW)
defop("relu", forward=lambda x: np.maximum(x, 0), vjps=(lambda g, ans, x: g * (x > 0),),
      doc="max(x, 0); gradient 0 at x == 0", **_EW)
defop("square", forward=np.square, vjps=(lambda g, ans, x: g * 2 * x,), doc="x * x", **_EW)

# ================================================================ reductions
_RED = dict(group="reductions", inputs=("x",), shape=reduce_shape,
            attrs={"axis": None, "keepdims": False})
defop("sum", forward=lambda x, axis=None, keepdims=False: np.sum(x, axis=axis, keepdims=keepdims),
      vjps=(lambda g, ans, x, axis=None, keepdims=False:
            np.broadcast_to(expand_reduced(g, x.ndim, axis, keepdims), x.shape),),
      doc="sum over axis (all axes by default)", **_RED)
defop("mean", forward=lambda x, axis=None, keepdims=False: np.mean(x, axis=axis, keepdims=keepdims),
      vjps=(lambda g, ans, x, axis=None, keepdims=False:
            np.broadcast_to(expand_reduced(g, x.ndim, axis, keepdims), x.shape) * (np.size(ans) / x.size),),
      doc="mean over axis (all axes by default)", out="float", **_RED)
defop("max", forward=lambda x, axis=None, keepdims=False: np.max(x, axis=axis, keepdims=keepdims),
      vjps=(reduce_extreme_vjp(np.argmax),),
      doc="maximum over axis; the gradient goes to the first maximal entry", **_RED)

# ================================================================ shape
defop("getitem", "shape", ("x",), lambda x, index=(): x[index], (getitem_vjp,), index_shape,
      "x[index]: integers, slices, None and ... (basic indexing)",
      attrs={"index": REQUIRED}, out="first")

# ================================================================ gradient control
defop("stop_gradient", "gradient control", ("x",), lambda x: x, (None,), same_shape,
      "identity forward, no gradient backward (alias: detach)", kind="stop", out="first")
