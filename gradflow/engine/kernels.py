"""Array code behind the op table: forwards and vjps too long for a lambda.

numpy only. Every function computes in the dtype of its inputs and ``g`` (Python
numbers only, never numpy float64 scalars), so a float32 tape stays float32.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from gradflow.engine.shapes import norm_axes


# ================================================================ arithmetic
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


def pow_vjp_base(g, ans, a, b):
    # Selected, not multiplied, where b == 0: an infinite g must not make 0 * inf = NaN there.
    return np.where(b == 0, 0, g * (b * a ** (b - 1)))


def pow_vjp_exponent(g, ans, a, b):
    # d(a**b)/db = a**b * log(a), as PyTorch: 0 only where a == 0 and b >= 0 (the result
    # is then constant in b); a negative base gives NaN (so it is reported, not hidden),
    # 0 ** negative gives inf * -inf = -inf.
    return g * np.where((a == 0) & (b >= 0), 0, ans * np.log(a))


# ================================================================ elementwise
def sigmoid(x):
    return np.exp(-np.logaddexp(0, -x))  # no overflow for large |x|


IN_PLACE = 1 << 14   # elements from which a rule's temporaries are worth reusing


def tanh_vjp(g, ans, x):
    """g * (1 - ans * ans), in one temporary where it can hold the result (the same numbers):
    on a large layer each fresh temporary costs more than its arithmetic; on a small one
    the tests for it cost more than the temporaries."""
    t = ans * ans
    if (t.size < IN_PLACE or t.__class__ is not np.ndarray or t.dtype != g.dtype
            or t.shape != np.shape(g)):
        return g * (1 - t)
    np.subtract(1, t, out=t)
    return np.multiply(g, t, out=t)


GELU_C = math.sqrt(2 / math.pi)


def gelu(x):
    return 0.5 * x * (1 + np.tanh(GELU_C * (x + 0.044715 * x ** 3)))


def gelu_vjp(g, ans, x):
    t = np.tanh(GELU_C * (x + 0.044715 * x ** 3))
    return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_C * (1 + 3 * 0.044715 * x * x))


def clip_vjp(g, ans, x, lo, hi):
    """g where lo <= x <= hi (edges included), else 0, as PyTorch's clamp: selected, so an
    infinite g outside the range gives 0, not 0 * inf = NaN."""
    inside = np.ones(np.shape(x), dtype=bool)
    if lo is not None:
        inside &= x >= lo
    if hi is not None:
        inside &= x <= hi
    return np.where(inside, g, 0)


def elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))  # expm1 never sees a large x


def extremum_vjp(mine, wins):
    """maximum/minimum for input ``mine`` (0 or 1), as PyTorch: half of g on ties, none where
    the other input wins, all of g otherwise (so both inputs get g where one is NaN)."""
    def vjp(g, ans, a, b):
        x, y = (a, b) if mine == 0 else (b, a)
        return np.where(x == y, g * 0.5, np.where(wins(y, x), 0, g))
    return vjp


# ================================================================ reductions
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
    def vjp(g, ans, x, axis=None, keepdims=False, ties="first"):
        g = expand_reduced(g, x.ndim, axis, keepdims)
        if ties == "split":   # as torch.amax: g / count * mask, so a NaN row or an infinite g gives NaN
            hit = x == expand_reduced(ans, x.ndim, axis, keepdims)
            return g / np.sum(hit, axis=axis, keepdims=True, dtype=g.dtype) * hit   # float32 stays float32
        # Selected (as torch.max(x, dim)): the other entries get 0 even when g is infinite.
        return np.where(first_extreme_mask(x, axis, pick), g, 0)
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


# ================================================================ shape
def getitem_vjp(g, ans, x, index=()):
    out = np.zeros(x.shape, dtype=g.dtype)
    out[index] = g  # basic indexing never repeats an element, so assignment suffices
    return out


def transpose_vjp(g, ans, x, axes=None):
    return np.transpose(g, None if axes is None else np.argsort([a % x.ndim for a in axes]))


def concat_vjp(g, ans, *xs, axis=0, index, memo=None):
    """The slice of ``g`` that input ``index`` filled; the inputs' offsets are found once per
    node (``memo``: see Op.vjps_for)."""
    a = axis % g.ndim
    starts = None if memo is None else memo.get("starts")
    if starts is None:
        starts = list(itertools.accumulate((x.shape[a] for x in xs), initial=0))
        if memo is not None:
            memo["starts"] = starts
    return g[(slice(None),) * a + (slice(starts[index], starts[index + 1]),)]


def take_vjp(g, ans, x, idx, axis=None):
    out = np.zeros(x.size if axis is None else x.shape, dtype=g.dtype)
    where = idx if axis is None else (slice(None),) * (axis % x.ndim) + (idx,)
    np.add.at(out, where, g)  # an index may repeat: contributions add up
    return out.reshape(x.shape)


def scattered_at(idx, axis):
    """The places of x that idx names: idx along axis, the entry's own place along the others."""
    where = list(np.indices(np.shape(idx), sparse=True))
    where[axis] = idx
    return tuple(where)


def take_along_axis_vjp(g, ans, x, idx, axis):
    a = axis % x.ndim
    out = np.zeros(g.shape[:a] + x.shape[a:a + 1] + g.shape[a + 1:], dtype=g.dtype)
    np.add.at(out, scattered_at(np.broadcast_to(idx, g.shape), a), g)
    return out  # in the broadcast shape: the tape sums it back to x's


# ================================================================ neural
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


def check_indices(idx, size: int, what: str = "index", negative: bool = False):
    """``idx``, after refusing an index out of range: PyTorch raises there, where numpy would
    wrap or (one_hot) give a row of zeros. ``negative``: -size..-1 count from the end."""
    low = -size if negative else 0
    if np.size(idx) and (np.min(idx) < low or np.max(idx) >= size):
        bad = int(np.min(idx)) if np.min(idx) < low else int(np.max(idx))
        raise IndexError(f"{what} {bad} is out of range for size {size}")
    return idx


def cross_entropy(logits, labels, ignore_index=None):
    if ignore_index is not None:   # PyTorch's: those rows count for nothing, the mean is over the rest
        kept = labels != ignore_index
        logits, labels = logits[kept], labels[kept]
        if not len(labels):
            return np.full((), np.nan, logits.dtype)   # every label ignored: 0 / 0, as PyTorch's
    check_indices(labels, logits.shape[1], "label")
    return -np.mean(np.take_along_axis(log_softmax(logits), labels[:, None], axis=1))


def cross_entropy_vjp(g, ans, logits, labels, ignore_index=None):
    p = softmax(logits)
    kept = np.arange(len(labels)) if ignore_index is None else np.flatnonzero(labels != ignore_index)
    if ignore_index is not None:
        p[labels == ignore_index] = 0   # an ignored row gets no gradient, all ignored none at all
    p[kept, labels[kept]] -= 1
    return p * (g / max(len(kept), 1))


def clamped_log(p):
    # PyTorch clamps BCE's logs at -100, so p of exactly 0 or 1 gives a finite loss.
    with np.errstate(divide="ignore"):
        return np.maximum(np.log(p), -100)


def binary_cross_entropy(p, y, reduction="mean"):
    each = -(y * clamped_log(p) + (1 - y) * clamped_log(1 - p))
    return each if reduction == "none" else np.sum(each) if reduction == "sum" else np.mean(each)


BCE_EPSILON = float(np.float32(1e-12))   # torch's floor on p(1 - p), a float32 constant there


def bce_vjp_p(g, ans, p, y, reduction="mean"):
    # torch's rule: (p - y) / p(1 - p), the divisor at least BCE_EPSILON, so a saturated p's gradient vanishes
    grad = g * (p - y) / np.maximum(p * (1 - p), BCE_EPSILON)
    return grad / np.broadcast(p, y).size if reduction == "mean" else grad


def bce_vjp_y(g, ans, p, y, reduction="mean"):
    with np.errstate(divide="ignore", invalid="ignore"):   # torch's -logit(p): infinite at p = 0 or 1
        grad = g * -np.log(p / (1 - p))
    if reduction == "mean":
        grad = grad / np.broadcast(p, y).size
    return np.broadcast_to(grad, np.broadcast_shapes(p.shape, y.shape))
