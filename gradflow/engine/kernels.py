"""Array code behind the op table: forwards and vjps too long for a lambda.

numpy only. Every function computes in the dtype of its inputs and ``g`` (Python
numbers only, never numpy float64 scalars), so a float32 tape stays float32.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from gradflow.engine.shapes import norm_axes
from gradflow.engine.shapes_nn import pair


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


def dropout_keep(shape, p, seed):
    """The keep-mask: a function of (shape, p, seed) only, so the vjp can recompute it."""
    return np.random.default_rng(seed).random(shape) >= p


def dropout(x, p, seed=0):
    scale = 0.0 if p >= 1 else 1 / (1 - p)
    return np.where(dropout_keep(np.shape(x), p, seed), x * scale, 0)


def dropout_vjp(g, ans, x, p, seed=0):
    # The same mask and scale (the op is linear in x), multiplied as PyTorch does: an
    # infinite g on a dropped entry is NaN there too, so GF105 sees what training would.
    scale = 0.0 if p >= 1 else 1 / (1 - p)
    return g * dropout_keep(np.shape(g), p, seed) * scale


# ================================================================ random draws
# Each draw is a function of its inputs and seed alone, as dropout's mask: the same model draws
# the same numbers every run. None passes gradient (torch gives zeros through them).
def bernoulli(p, seed=0):
    """1 with probability p, else 0: a uniform draw below p."""
    if not np.all((p >= 0) & (p <= 1)):   # NaN too, as torch refuses them
        raise ValueError("probabilities must be in [0, 1]")
    return np.random.default_rng(seed).random(np.shape(p)) < p


def normal(mean, std, seed=0):
    """mean + std * a standard normal draw, of the two's broadcast shape."""
    if not np.all(std >= 0):   # NaN too, as torch refuses them
        raise ValueError("std must be >= 0")
    noise = np.random.default_rng(seed).standard_normal(np.broadcast_shapes(np.shape(mean), np.shape(std)))
    return mean + std * noise


def multinomial(p, n, replacement=False, seed=0):
    """n class indices for each row of weights p [..., C], each drawn in proportion to its weight:
    with replacement by inverting the row's running sum at uniform draws, without it as the n
    largest of log p plus Gumbel noise (a draw without replacement, in proportion to p)."""
    if not np.all(p >= 0) or not np.all(np.isfinite(p)) or not np.all(np.any(p > 0, axis=-1)):
        # torch refuses them too: a draw from weights that are no distribution
        raise ValueError("weights must be finite and >= 0, with at least one above 0 in each row")
    rng = np.random.default_rng(seed)
    if replacement:   # a row at a time: no [..., n, C] comparison, which a large n * C would not fit
        classes = np.shape(p)[-1]
        running = np.cumsum(p, axis=-1).reshape(-1, classes)
        u = rng.random((len(running), n)) * running[:, -1:]
        drawn = np.stack([np.searchsorted(r, row, side="right") for r, row in zip(running, u)])
        return np.minimum(drawn, classes - 1).reshape(*np.shape(p)[:-1], n)
    with np.errstate(divide="ignore"):
        keys = np.log(p) + rng.gumbel(size=np.shape(p))
    return np.argsort(-keys, axis=-1, kind="stable")[..., :n]


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
