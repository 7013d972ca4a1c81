"""OPS: the one table of operations. An op is one entry, nothing more.

Each entry gives the forward (on numpy arrays), one vector-Jacobian product per
tensor input (``None``: no gradient ever passes through that input), a shape
rule that works on shapes alone (so models far larger than memory can still be
checked), the output dtype and a one-line doc. ``gradflow ops`` prints this table.

A vjp is called as ``vjp(g, ans, *inputs, **attrs)`` and returns the gradient for
its input in the *broadcast* shape; the tape sums it back to the input's shape.
Static arguments (``axis``, ``keepdims``, ``slope``, an index) are attributes,
never tensors, and carry no gradient. Rules compute in the dtype of ``g`` and the
inputs (Python numbers only), so a float32 tape stays float32.

kinds: ``differentiable``; ``stop`` (explicit stop-gradient, identity forward);
``implicit`` (non-differentiable op: every input is cut).

Conventions follow PyTorch/numpy: ties in max/min/argmax go to the first index,
``maximum``/``minimum`` split the gradient in half on ties, ``gelu`` is the tanh
approximation, ``var`` is the population variance, losses average.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from gradflow.errors import ShapeError

REQUIRED = object()  # marks an attribute with no default


@dataclass(frozen=True, slots=True)
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
    variadic: bool = field(init=False, repr=False)  # takes a list of tensors (inputs == ("*xs",))

    def __post_init__(self):
        # Stored, not computed: the tape's backward asks for every node.
        object.__setattr__(self, "variadic", self.inputs[:1] == ("*xs",))

    def bind_attrs(self, given: dict) -> dict:
        """Complete ``given`` with defaults; unknown or missing attributes raise TypeError.

        Lists become tuples, as numpy takes only tuples for ``axis``.
        """
        if not given and not self.attrs:
            return {}
        unknown = set(given) - set(self.attrs)
        if unknown:
            raise TypeError(f"{self.name}() got an unexpected argument {sorted(unknown)[0]!r}")
        bound = {**self.attrs, **given}
        missing = [k for k, v in bound.items() if v is REQUIRED]
        if missing:
            raise TypeError(f"{self.name}() is missing argument {missing[0]!r}")
        return {k: tuple(v) if isinstance(v, list) else v for k, v in bound.items()}

    def vjps_for(self, n_inputs: int) -> tuple:
        if not self.variadic:
            return self.vjps
        rule = self.vjps[0]
        return tuple(None if rule is None else functools.partial(rule, index=k) for k in range(n_inputs))

    def infer_shape(self, *shapes, **attrs) -> tuple:
        """The shape rule, with the op's name leading every error message."""
        try:
            return tuple(self.shape(*shapes, **attrs))
        except ShapeError as e:
            message = str(e)
            if message.startswith(self.name):
                raise
            raise ShapeError(f"{self.name}: {message}") from None

    def check_dtypes(self, dtypes) -> None:
        for k in self.int_inputs:
            if dtype_kind(dtypes[k]) != "i":
                raise ShapeError(f"{self.name}: argument {self.inputs[k]!r} must be an integer tensor, "
                                 f"got {np.dtype(dtypes[k]).name}")

    def out_dtype(self, dtypes, float_dtype) -> np.dtype:
        """The output dtype from the input dtypes alone (lazy tapes).

        ``promote`` looks only at inputs that can carry gradient, so a where's
        condition or an index never turns an integer result into a float one.
        """
        if self.out == "promote" and self.kind == "differentiable":
            rules = self.vjps_for(len(dtypes))
            dtypes = [d for d, rule in zip(dtypes, rules) if rule is not None]
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


def is_int(n) -> bool:
    return isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_))


def norm_axes(axis, ndim, shape=None) -> tuple[int, ...]:
    """Normalise an axis attribute (None, int or sequence, negatives allowed) to a sorted tuple."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if is_int(axis) else tuple(axis)
    out = []
    for a in axes:
        if not is_int(a) or not -ndim <= a < ndim:
            raise ShapeError(f"axis {a} is out of range for shape {fmt(shape or ())}")
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated axis in {axis}")
    return tuple(sorted(out))


def norm_axis(axis, ndim, shape=None) -> int:
    """One axis (an int, negatives allowed) normalised to 0..ndim-1."""
    if not is_int(axis):
        raise ShapeError(f"axis must be one integer, got {axis!r}")
    return norm_axes(axis, ndim, shape)[0]


def reduce_shape(x, axis=None, keepdims=False, **_):
    axes = norm_axes(axis, len(x), x)
    if keepdims:
        return tuple(1 if i in axes else n for i, n in enumerate(x))
    return tuple(n for i, n in enumerate(x) if i not in axes)


def arg_shape(x, axis=None, keepdims=False):
    if axis is not None:
        norm_axis(axis, len(x), x)  # argmax takes one axis or all of them
    return reduce_shape(x, axis, keepdims)


def axis_shape(x, axis=-1, **_):
    norm_axes(axis, len(x), x)
    return x


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


def as_sizes(shape) -> tuple:
    return (shape,) if is_int(shape) else tuple(shape)


def reshape_shape(x, shape):
    target = as_sizes(shape)
    where = f"reshape of {fmt(x)} to {fmt(target)}"
    if any(not is_int(n) or n < -1 for n in target):
        raise ShapeError(f"{where}: sizes must be integers >= 0, or -1 once")
    if target.count(-1) > 1:
        raise ShapeError(f"{where}: only one size may be -1")
    size, known = math.prod(x), math.prod(n for n in target if n != -1)
    if -1 not in target:
        if size != known:
            raise ShapeError(f"{where}: {size} elements do not fit {known}")
        return target
    if known == 0 or size % known:
        shown = "[" + ", ".join("?" if n == -1 else str(n) for n in target) + "]"
        raise ShapeError(f"{where}: {size} elements do not fill {shown}")
    return tuple(size // known if n == -1 else n for n in target)


def transpose_shape(x, axes=None):
    if axes is None:
        return x[::-1]
    perm = as_sizes(axes)
    ok = all(is_int(a) and -len(x) <= a < len(x) for a in perm) and \
        sorted(a % len(x) for a in perm) == list(range(len(x)))
    if not ok:
        raise ShapeError(f"transpose of {fmt(x)} with axes {fmt(perm)}: "
                         f"not a permutation of the {len(x)} axes")
    return tuple(x[a] for a in perm)


def expand_dims_shape(x, axis):
    axes = (axis,) if is_int(axis) else tuple(axis)
    new = norm_axes(axes, len(x) + len(axes), x)
    rest = iter(x)
    return tuple(1 if i in new else next(rest) for i in range(len(x) + len(axes)))


def squeeze_shape(x, axis=None):
    if axis is None:
        return tuple(n for n in x if n != 1)
    axes = norm_axes(axis, len(x), x)
    wide = [a for a in axes if x[a] != 1]
    if wide:
        raise ShapeError(f"squeeze of {fmt(x)} along axis {wide[0]}: size {x[wide[0]]} is not 1")
    return tuple(n for i, n in enumerate(x) if i not in axes)


def broadcast_to_shape(x, shape):
    target = as_sizes(shape)
    where = f"broadcast_to of {fmt(x)} to {fmt(target)}"
    if any(not is_int(n) or n < 0 for n in target):
        raise ShapeError(f"{where}: sizes must be integers >= 0")
    if len(x) > len(target):
        raise ShapeError(f"{where}: cannot remove axes")
    for n, m in zip(x[::-1], target[::-1]):
        if n not in (1, m):
            raise ShapeError(f"{where}: {n} cannot become {m}")
    return target


def concat_shape(*xs, axis=0):
    if not xs:
        raise ShapeError("concat of no tensors")
    first = xs[0]
    if not first or any(len(s) != len(first) for s in xs):
        raise ShapeError("concat of " + " and ".join(fmt(s) for s in xs) +
                         ": tensors need the same number of axes, at least one")
    a = norm_axis(axis, len(first), first)
    if any(s[:a] + s[a + 1:] != first[:a] + first[a + 1:] for s in xs):
        raise ShapeError(f"concat along axis {axis} of " + " and ".join(fmt(s) for s in xs) +
                         ": other axes differ")
    return first[:a] + (sum(s[a] for s in xs),) + first[a + 1:]


def stack_shape(*xs, axis=0):
    if not xs:
        raise ShapeError("stack of no tensors")
    if any(s != xs[0] for s in xs):
        raise ShapeError("stack of " + " and ".join(fmt(s) for s in xs) + ": shapes differ")
    a = norm_axis(axis, len(xs[0]) + 1, xs[0])
    return xs[0][:a] + (len(xs),) + xs[0][a:]


def take_shape(x, idx, axis=None):
    if axis is None:
        return idx
    a = norm_axis(axis, len(x), x)
    return x[:a] + idx + x[a + 1:]


def take_along_axis_shape(x, idx, axis):
    if len(idx) != len(x):
        raise ShapeError(f"take_along_axis of {fmt(x)} with index {fmt(idx)}: "
                         f"the index needs {len(x)} axes")
    a = norm_axis(axis, len(x), x)
    try:
        rest = broadcast_shape(x[:a] + x[a + 1:], idx[:a] + idx[a + 1:])
    except ShapeError:
        raise ShapeError(f"take_along_axis of {fmt(x)} with index {fmt(idx)}: "
                         f"axes other than {axis} do not broadcast") from None
    return rest[:a] + (idx[a],) + rest[a:]


def loss_shape(a, b):
    broadcast_shape(a, b)  # raises on a mismatch
    return ()


def layer_norm_shape(x, gamma, beta, eps=1e-5):
    if not x:
        raise ShapeError("layer_norm of a scalar: needs at least one axis")
    for name, s in (("gamma", gamma), ("beta", beta)):
        if s != x[-1:]:
            raise ShapeError(f"layer_norm of {fmt(x)} with {name} {fmt(s)}: {name} must be {fmt(x[-1:])}")
    return x


def cross_entropy_shape(logits, labels):
    if len(logits) != 2 or len(labels) != 1:
        raise ShapeError(f"cross_entropy of logits {fmt(logits)} and labels {fmt(labels)}: "
                         "logits must be [N, C] and labels [N]")
    if logits[0] != labels[0]:
        raise ShapeError(f"cross_entropy of logits {fmt(logits)} and labels {fmt(labels)}: "
                         f"{logits[0]} != {labels[0]}")
    return ()


def dropout_shape(x, p, seed=0):
    if not 0 <= p <= 1:
        raise ShapeError(f"dropout probability must be in [0, 1], got {p}")
    return x


def one_hot_shape(idx, n):
    if not is_int(n) or n < 0:
        raise ShapeError(f"one_hot needs a class count n >= 0, got {n!r}")
    return idx + (n,)


def pair(v, what, least) -> tuple[int, int]:
    """An int or a pair of ints (height, width), each at least ``least``."""
    out = (v, v) if is_int(v) else tuple(v)
    if len(out) != 2 or not all(is_int(n) and n >= least for n in out):
        raise ShapeError(f"{what} must be an integer >= {least} or a pair of them, got {v!r}")
    return out


def conv2d_shape(x, w, stride=1, padding=0):
    where = f"conv2d of {fmt(x)} and {fmt(w)}"
    if len(x) != 4 or len(w) != 4:
        raise ShapeError(f"{where}: input must be [N, C, H, W] and weight [O, C, kH, kW]")
    if x[1] != w[1]:
        raise ShapeError(f"{where}: {x[1]} input channels != {w[1]}")
    (sh, sw), (ph, pw) = pair(stride, "stride", 1), pair(padding, "padding", 0)
    h, wd = x[2] + 2 * ph, x[3] + 2 * pw
    if w[2] > h or w[3] > wd:
        raise ShapeError(f"{where}: kernel {fmt(w[2:])} is larger than the padded input {fmt((h, wd))}")
    return (x[0], w[0], (h - w[2]) // sh + 1, (wd - w[3]) // sw + 1)


def pool_shape(x, kernel, stride=None):
    if len(x) < 2:
        raise ShapeError(f"pooling of {fmt(x)}: needs [..., H, W]")
    (kh, kw) = pair(kernel, "kernel", 1)
    (sh, sw) = pair(kernel if stride is None else stride, "stride", 1)
    if kh > x[-2] or kw > x[-1]:
        raise ShapeError(f"kernel {fmt((kh, kw))} is larger than the input {fmt(x[-2:])}")
    return x[:-2] + ((x[-2] - kh) // sh + 1, (x[-1] - kw) // sw + 1)


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


GELU_C = math.sqrt(2 / math.pi)


def gelu(x):
    return 0.5 * x * (1 + np.tanh(GELU_C * (x + 0.044715 * x ** 3)))


def gelu_vjp(g, ans, x):
    t = np.tanh(GELU_C * (x + 0.044715 * x ** 3))
    return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_C * (1 + 3 * 0.044715 * x * x))


def elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))  # expm1 never sees a large x


def extremum_vjp(mine, wins):
    """maximum/minimum for input ``mine`` (0 or 1): all of g where it wins, half on ties (as PyTorch)."""
    def vjp(g, ans, a, b):
        x, y = (a, b) if mine == 0 else (b, a)
        return np.where(wins(x, y), g, np.where(x == y, g * 0.5, 0))
    return vjp


def logsumexp(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)  # all -inf along an axis: subtract nothing
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=norm_axes(axis, x.ndim))


def var_vjp(g, ans, x, axis=None, keepdims=False):
    n = x.size // max(np.size(ans), 1)
    centred = x - np.mean(x, axis=axis, keepdims=True)
    return expand_reduced(g, x.ndim, axis, keepdims) * centred * (2 / max(n, 1))


def norm_vjp(g, ans, x, axis=None, keepdims=False):
    # Zero at a zero norm (the subgradient PyTorch picks) instead of 0/0.
    length = expand_reduced(ans, x.ndim, axis, keepdims)
    return expand_reduced(g, x.ndim, axis, keepdims) * x / np.where(length == 0, np.inf, length)


def transpose_vjp(g, ans, x, axes=None):
    return np.transpose(g, None if axes is None else np.argsort([a % x.ndim for a in axes]))


def concat_vjp(g, ans, *xs, axis=0, index):
    a = axis % g.ndim
    start = sum(x.shape[a] for x in xs[:index])
    return g[(slice(None),) * a + (slice(start, start + xs[index].shape[a]),)]


def take_vjp(g, ans, x, idx, axis=None):
    out = np.zeros(x.size if axis is None else x.shape, dtype=g.dtype)
    where = idx if axis is None else (slice(None),) * (axis % x.ndim) + (idx,)
    np.add.at(out, where, g)  # an index may repeat: contributions add up
    return out.reshape(x.shape)


def take_along_axis_vjp(g, ans, x, idx, axis):
    a = axis % x.ndim
    out = np.zeros(g.shape[:a] + x.shape[a:a + 1] + g.shape[a + 1:], dtype=g.dtype)
    where = list(np.indices(g.shape, sparse=True))
    where[a] = np.broadcast_to(idx, g.shape)
    np.add.at(out, tuple(where), g)
    return out  # in the broadcast shape: the tape sums it back to x's


def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    return x - logsumexp(x, axis=axis, keepdims=True)


def normalised(x, eps):
    """layer_norm's x-hat and 1/sigma over the last axis."""
    centred = x - np.mean(x, axis=-1, keepdims=True)
    inv = 1 / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + eps)
    return centred * inv, inv


def layer_norm_vjp_x(g, ans, x, gamma, beta, eps=1e-5):
    xhat, inv = normalised(x, eps)
    d = g * gamma
    return inv * (d - np.mean(d, axis=-1, keepdims=True) - xhat * np.mean(d * xhat, axis=-1, keepdims=True))


def cross_entropy(logits, labels):
    return -np.mean(np.take_along_axis(log_softmax(logits), labels[:, None], axis=1))


def cross_entropy_vjp(g, ans, logits, labels):
    p = softmax(logits)
    p[np.arange(len(labels)), labels] -= 1
    return p * (g / max(len(labels), 1))


def clamped_log(p):
    # PyTorch clamps BCE's logs at -100, so p of exactly 0 or 1 gives a finite loss.
    with np.errstate(divide="ignore"):
        return np.maximum(np.log(p), -100)


def binary_cross_entropy(p, y):
    return -np.mean(y * clamped_log(p) + (1 - y) * clamped_log(1 - p))


def bce_vjp_p(g, ans, p, y):
    n = np.broadcast(p, y).size
    return g * (p - y) / np.maximum(p * (1 - p), 1e-12) / n


def bce_vjp_y(g, ans, p, y):
    n = np.broadcast(p, y).size
    grad = g * (clamped_log(1 - p) - clamped_log(p)) / n
    return np.broadcast_to(grad, np.broadcast_shapes(p.shape, y.shape))


def dropout_keep(shape, p, seed):
    """The keep-mask: a function of (shape, p, seed) only, so the vjp can recompute it."""
    return np.random.default_rng(seed).random(shape) >= p


def dropout(x, p, seed=0):
    scale = 0.0 if p >= 1 else 1 / (1 - p)
    return np.where(dropout_keep(np.shape(x), p, seed), x * scale, 0)


def dropout_vjp(g, ans, x, p, seed=0):
    return dropout(g, p, seed)  # the same mask and scale: the op is linear in x


def pad2d(x, padding):
    (ph, pw) = pair(padding, "padding", 0)
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else x


def windows(x, kernel, stride):
    """Every (kh, kw) window of the last two axes, strided: a view (..., Ho, Wo, kh, kw)."""
    (kh, kw), (sh, sw) = pair(kernel, "kernel", 1), pair(stride, "stride", 1)
    return sliding_window_view(x, (kh, kw), axis=(-2, -1))[..., ::sh, ::sw, :, :]


def conv2d(x, w, stride=1, padding=0):
    cols = windows(pad2d(x, padding), w.shape[2:], stride)       # N, C, Ho, Wo, kh, kw
    out = np.tensordot(cols, w, axes=([1, 4, 5], [1, 2, 3]))     # N, Ho, Wo, O
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


def conv2d_vjp_w(g, ans, x, w, stride=1, padding=0):
    cols = windows(pad2d(x, padding), w.shape[2:], stride)
    return np.tensordot(g, cols, axes=([0, 2, 3], [0, 2, 3]))


def conv2d_vjp_x(g, ans, x, w, stride=1, padding=0):
    (sh, sw), (ph, pw) = pair(stride, "stride", 1), pair(padding, "padding", 0)
    _, _, kh, kw = w.shape
    ho, wo = g.shape[2:]
    parts = np.tensordot(g, w, axes=([1], [0]))                  # N, Ho, Wo, C, kh, kw
    out = np.zeros((x.shape[0], x.shape[1], x.shape[2] + 2 * ph, x.shape[3] + 2 * pw), dtype=g.dtype)
    for i in range(kh):  # each kernel offset scatters one strided slice
        for j in range(kw):
            out[:, :, i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw] += \
                parts[..., i, j].transpose(0, 3, 1, 2)
    return out[:, :, ph:ph + x.shape[2], pw:pw + x.shape[3]]


def pool_windows(x, kernel, stride):
    cols = windows(x, kernel, kernel if stride is None else stride)
    return cols.reshape(cols.shape[:-2] + (-1,))                 # ..., Ho, Wo, kh*kw


def max_pool2d_vjp(g, ans, x, kernel, stride=None):
    (kh, kw) = pair(kernel, "kernel", 1)
    (sh, sw) = pair(kernel if stride is None else stride, "stride", 1)
    first = np.argmax(pool_windows(x, kernel, stride), axis=-1)  # ties: the first in the window
    ho, wo = g.shape[-2:]
    rows = np.arange(ho)[:, None] * sh + first // kw
    cols = np.arange(wo) * sw + first % kw
    h, w = x.shape[-2:]
    flat_g, flat_at = g.reshape(-1, ho * wo), (rows * w + cols).reshape(-1, ho * wo)
    out = np.zeros((flat_g.shape[0], h * w), dtype=g.dtype)
    np.add.at(out, (np.arange(out.shape[0])[:, None], flat_at), flat_g)  # windows may overlap
    return out.reshape(x.shape)


def avg_pool2d_vjp(g, ans, x, kernel, stride=None):
    (kh, kw) = pair(kernel, "kernel", 1)
    (sh, sw) = pair(kernel if stride is None else stride, "stride", 1)
    ho, wo = g.shape[-2:]
    out = np.zeros(x.shape, dtype=g.dtype)
    share = g / (kh * kw)
    for i in range(kh):
        for j in range(kw):
            out[..., i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw] += share
    return out


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
defop("log1p", forward=np.log1p, vjps=(lambda g, ans, x: g / (1 + x),),
      doc="log(1 + x), accurate for small x", **_EW)
defop("sqrt", forward=np.sqrt, vjps=(lambda g, ans, x: g / (2 * ans),), doc="square root", **_EW)
defop("square", forward=np.square, vjps=(lambda g, ans, x: g * 2 * x,), doc="x * x", **_EW)
defop("abs", forward=np.abs, vjps=(lambda g, ans, x: g * np.sign(x),),
      doc="|x|; gradient 0 at x == 0", **_EW)
defop("sin", forward=np.sin, vjps=(lambda g, ans, x: g * np.cos(x),), doc="sine", **_EW)
defop("cos", forward=np.cos, vjps=(lambda g, ans, x: -g * np.sin(x),), doc="cosine", **_EW)
defop("tanh", forward=np.tanh, vjps=(lambda g, ans, x: g * (1 - ans * ans),),
      doc="hyperbolic tangent", **_EW)
defop("sigmoid", forward=sigmoid, vjps=(lambda g, ans, x: g * ans * (1 - ans),),
      doc="1 / (1 + e ** -x), computed without overflow", **_EW)
defop("relu", forward=lambda x: np.maximum(x, 0), vjps=(lambda g, ans, x: g * (x > 0),),
      doc="max(x, 0); gradient 0 at x == 0", **_EW)
defop("leaky_relu", forward=lambda x, slope=0.01: np.where(x > 0, x, x * slope),
      vjps=(lambda g, ans, x, slope=0.01: np.where(x > 0, g, g * slope),),
      doc="x if x > 0 else slope * x", attrs={"slope": 0.01}, **_EW)
defop("elu", forward=elu, vjps=(lambda g, ans, x, alpha=1.0: np.where(x > 0, g, g * (ans + alpha)),),
      doc="x if x > 0 else alpha * (e ** x - 1)", attrs={"alpha": 1.0}, **_EW)
defop("gelu", forward=gelu, vjps=(gelu_vjp,),
      doc="x * Phi(x), tanh approximation (as PyTorch's approximate='tanh')", **_EW)
defop("softplus", forward=lambda x: np.logaddexp(0, x), vjps=(lambda g, ans, x: g * sigmoid(x),),
      doc="log(1 + e ** x), computed without overflow", **_EW)
defop("clip", forward=lambda x, lo, hi: np.clip(x, lo, hi),
      vjps=(lambda g, ans, x, lo, hi: g * (ans == x),),  # passes where unclipped, edges included
      doc="x limited to [lo, hi] (either may be None); gradient passes where lo <= x <= hi",
      attrs={"lo": REQUIRED, "hi": REQUIRED}, **_EW)
_EW2 = dict(group="elementwise", inputs=("a", "b"), shape=broadcast_shape)
defop("maximum", forward=np.maximum, vjps=(extremum_vjp(0, np.greater), extremum_vjp(1, np.greater)),
      doc="elementwise larger of a and b; on ties each gets half the gradient", **_EW2)
defop("minimum", forward=np.minimum, vjps=(extremum_vjp(0, np.less), extremum_vjp(1, np.less)),
      doc="elementwise smaller of a and b; on ties each gets half the gradient", **_EW2)
defop("where", "elementwise", ("cond", "a", "b"), lambda cond, a, b: np.where(cond, a, b),
      (None, lambda g, ans, cond, a, b: np.where(cond, g, 0),
       lambda g, ans, cond, a, b: np.where(cond, 0, g)),
      broadcast_shape, "a where cond is non-zero, else b; no gradient through cond")

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
defop("min", forward=lambda x, axis=None, keepdims=False: np.min(x, axis=axis, keepdims=keepdims),
      vjps=(reduce_extreme_vjp(np.argmin),),
      doc="minimum over axis; the gradient goes to the first minimal entry", **_RED)
defop("logsumexp", forward=logsumexp,
      vjps=(lambda g, ans, x, axis=None, keepdims=False: expand_reduced(g, x.ndim, axis, keepdims)
            * np.exp(x - expand_reduced(ans, x.ndim, axis, keepdims)),),
      doc="log(sum(exp(x))) over axis, computed without overflow", out="float", **_RED)
defop("var", forward=lambda x, axis=None, keepdims=False: np.var(x, axis=axis, keepdims=keepdims),
      vjps=(var_vjp,), doc="population variance (ddof=0) over axis", out="float", **_RED)
defop("norm", forward=lambda x, axis=None, keepdims=False: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims)),
      vjps=(norm_vjp,), doc="L2 norm over axis; gradient 0 at a zero norm", out="float", **_RED)

# ================================================================ shape
_SH = dict(group="shape", inputs=("x",), out="first")
defop("getitem", "shape", ("x",), lambda x, index=(): x[index], (getitem_vjp,), index_shape,
      "x[index]: integers, slices, None and ... (basic indexing)",
      attrs={"index": REQUIRED}, out="first")
defop("reshape", forward=lambda x, shape: np.reshape(x, shape),
      vjps=(lambda g, ans, x, shape: np.reshape(g, x.shape),), shape=reshape_shape,
      doc="x with a new shape of the same size; one size may be -1", attrs={"shape": REQUIRED}, **_SH)
defop("transpose", forward=lambda x, axes=None: np.transpose(x, axes), vjps=(transpose_vjp,),
      shape=transpose_shape, doc="permute the axes (reverse them by default)", attrs={"axes": None}, **_SH)
defop("expand_dims", forward=lambda x, axis: np.expand_dims(x, axis),
      vjps=(lambda g, ans, x, axis: np.reshape(g, x.shape),), shape=expand_dims_shape,
      doc="insert axes of size 1 at axis (int or tuple)", attrs={"axis": REQUIRED}, **_SH)
defop("squeeze", forward=lambda x, axis=None: np.squeeze(x, axis),
      vjps=(lambda g, ans, x, axis=None: np.reshape(g, x.shape),), shape=squeeze_shape,
      doc="remove axes of size 1 (all of them by default)", attrs={"axis": None}, **_SH)
defop("broadcast_to", forward=lambda x, shape: np.broadcast_to(x, shape),
      vjps=(lambda g, ans, x, shape: g,), shape=broadcast_to_shape,
      doc="x repeated to shape by numpy's broadcasting", attrs={"shape": REQUIRED}, **_SH)
defop("concat", "shape", ("*xs",), lambda *xs, axis=0: np.concatenate(xs, axis=axis), (concat_vjp,),
      concat_shape, "join tensors along an existing axis", attrs={"axis": 0})
defop("stack", "shape", ("*xs",), lambda *xs, axis=0: np.stack(xs, axis=axis),
      (lambda g, ans, *xs, axis=0, index: np.take(g, index, axis=axis),),
      stack_shape, "join same-shape tensors along a new axis", attrs={"axis": 0})
defop("take", "shape", ("x", "idx"), lambda x, idx, axis=None: np.take(x, idx, axis=axis),
      (take_vjp, None), take_shape, "x's entries at integer indices idx along axis (flattened by default)",
      attrs={"axis": None}, out="first", int_inputs=(1,))
defop("take_along_axis", "shape", ("x", "idx"), lambda x, idx, axis: np.take_along_axis(x, idx, axis),
      (take_along_axis_vjp, None), take_along_axis_shape,
      "x's entries at idx along axis, idx with x's number of axes (numpy rules)",
      attrs={"axis": REQUIRED}, out="first", int_inputs=(1,))

# ================================================================ neural
_NN = dict(group="neural", out="float")
defop("softmax", inputs=("x",), forward=softmax,
      vjps=(lambda g, ans, x, axis=-1: ans * (g - np.sum(g * ans, axis=axis, keepdims=True)),),
      shape=axis_shape, doc="exp(x) / sum(exp(x)) over axis, computed without overflow",
      attrs={"axis": -1}, **_NN)
defop("log_softmax", inputs=("x",), forward=log_softmax,
      vjps=(lambda g, ans, x, axis=-1: g - np.exp(ans) * np.sum(g, axis=axis, keepdims=True),),
      shape=axis_shape, doc="x - logsumexp(x) over axis, computed without overflow",
      attrs={"axis": -1}, **_NN)
defop("layer_norm", inputs=("x", "gamma", "beta"),
      forward=lambda x, gamma, beta, eps=1e-5: normalised(x, eps)[0] * gamma + beta,
      vjps=(layer_norm_vjp_x, lambda g, ans, x, gamma, beta, eps=1e-5: g * normalised(x, eps)[0],
            lambda g, ans, x, gamma, beta, eps=1e-5: g),
      shape=layer_norm_shape, doc="normalise the last axis (eps=1e-5), then scale by gamma, shift by beta",
      attrs={"eps": 1e-5}, **_NN)
defop("cross_entropy", inputs=("logits", "labels"), forward=cross_entropy, vjps=(cross_entropy_vjp, None),
      shape=cross_entropy_shape, doc="mean over N of -log softmax(logits)[label]; logits [N, C], labels [N]",
      int_inputs=(1,), **_NN)
defop("mse", inputs=("a", "b"), forward=lambda a, b: np.mean(np.square(a - b)),
      vjps=(lambda g, ans, a, b: g * 2 * (a - b) / np.broadcast(a, b).size,
            lambda g, ans, a, b: g * 2 * (b - a) / np.broadcast(a, b).size),
      shape=loss_shape, doc="mean squared error", **_NN)
defop("binary_cross_entropy", inputs=("p", "y"), forward=binary_cross_entropy, vjps=(bce_vjp_p, bce_vjp_y),
      shape=loss_shape, doc="mean of -(y log p + (1 - y) log(1 - p)); logs clamped at -100 (as PyTorch)",
      **_NN)
defop("dropout", inputs=("x",), forward=dropout, vjps=(dropout_vjp,), shape=dropout_shape,
      doc="zero each entry with probability p (mask from seed), scale the rest by 1/(1-p)",
      attrs={"p": REQUIRED, "seed": 0}, **_NN)
defop("conv2d", inputs=("x", "w"), forward=conv2d, vjps=(conv2d_vjp_x, conv2d_vjp_w), shape=conv2d_shape,
      doc="2-D cross-correlation: x [N, C, H, W], w [O, C, kH, kW]; stride and padding int or pair",
      attrs={"stride": 1, "padding": 0}, **_NN)
defop("max_pool2d", inputs=("x",),
      forward=lambda x, kernel, stride=None: np.max(pool_windows(x, kernel, stride), axis=-1),
      vjps=(max_pool2d_vjp,), shape=pool_shape,
      doc="maximum over windows of the last two axes; stride defaults to kernel; ties go to the first",
      attrs={"kernel": REQUIRED, "stride": None}, **_NN)
defop("avg_pool2d", inputs=("x",),
      forward=lambda x, kernel, stride=None: np.mean(pool_windows(x, kernel, stride), axis=-1),
      vjps=(avg_pool2d_vjp,), shape=pool_shape,
      doc="mean over windows of the last two axes; stride defaults to kernel",
      attrs={"kernel": REQUIRED, "stride": None}, **_NN)
defop("one_hot", inputs=("idx",), forward=lambda idx, n: np.equal(np.expand_dims(idx, -1), np.arange(n)),
      vjps=(None,), shape=one_hot_shape, doc="a float [..., n] that is 1 at each integer index",
      attrs={"n": REQUIRED}, int_inputs=(0,), **_NN)

# ================================================================ gradient control
defop("stop_gradient", "gradient control", ("x",), lambda x: x, (None,), same_shape,
      "identity forward, no gradient backward (alias: detach)", kind="stop", out="first")
defop("grad_scale", "gradient control", ("x",), lambda x, s: x, (lambda g, ans, x, s: g * s,),
      same_shape, "identity forward, gradient times s backward", attrs={"s": REQUIRED}, out="first")
defop("grad_reverse", "gradient control", ("x",), lambda x: x, (lambda g, ans, x: -g,), same_shape,
      "identity forward, gradient negated backward (domain-adversarial training)", out="first")

# ================================================================ non-differentiable
_ND = dict(group="non-differentiable", kind="implicit")
defop("argmax", inputs=("x",), forward=lambda x, axis=None, keepdims=False:
      np.argmax(x, axis=axis, keepdims=keepdims), vjps=(None,), shape=arg_shape,
      doc="index of the first maximum over axis (of the flattened x by default)",
      attrs={"axis": None, "keepdims": False}, out="int", **_ND)
defop("argmin", inputs=("x",), forward=lambda x, axis=None, keepdims=False:
      np.argmin(x, axis=axis, keepdims=keepdims), vjps=(None,), shape=arg_shape,
      doc="index of the first minimum over axis (of the flattened x by default)",
      attrs={"axis": None, "keepdims": False}, out="int", **_ND)
for _name, _fn, _doc in [("round", np.round, "round half to even"), ("floor", np.floor, "round down"),
                         ("ceil", np.ceil, "round up"), ("sign", np.sign, "-1, 0 or 1")]:
    defop(_name, inputs=("x",), forward=_fn, vjps=(None,), shape=same_shape, doc=_doc, out="float", **_ND)
for _name, _fn, _sym in [("less", np.less, "<"), ("less_equal", np.less_equal, "<="),
                         ("greater", np.greater, ">"), ("greater_equal", np.greater_equal, ">="),
                         ("equal", np.equal, "=="), ("not_equal", np.not_equal, "!=")]:
    defop(_name, inputs=("a", "b"), forward=_fn, vjps=(None, None), shape=broadcast_shape,
          doc=f"a {_sym} b as 0.0 / 1.0", out="float", **_ND)
del _name, _fn, _doc, _sym
