"""Array code of the scans, sorts and scatters: cumprod's, logcumsumexp's and prod's gradients,
the running arg-max, a stable argsort, a sorted search, scatter, scatter_add and scatter_reduce.

Each follows PyTorch: its CPU kernels where the order of work decides a result (which of
tied entries a running maximum or a sort returns, which of repeated scatter indices is
written), its gradient formulas where precision or a zero is at stake.
"""

from __future__ import annotations

import numpy as np

from gradflow.engine.kernels import check_indices, expand_reduced, scattered_at
from gradflow.engine.shapes import norm_axes

# ================================================================ scans
def reversed_cumsum(g, axis):
    return np.flip(np.cumsum(np.flip(g, axis), axis), axis)


def cumprod_vjp(g, ans, x, axis):
    """torch's rule: sum over j >= k of g_j y_j / x_k where no x is 0; in a slice with zeros,
    that before its first zero, at the first zero the products that leave it out (up to the
    second zero), and 0 after it, where every product holds the first zero."""
    w = ans * g
    zero = x == 0
    if not zero.any():
        return reversed_cumsum(w, axis) / x
    zeros_so_far = np.cumsum(zero, axis)
    before, first = zeros_so_far == 0, zero & (zeros_so_far == 1)
    out = np.where(before, reversed_cumsum(np.where(before, w, 0), axis) / np.where(before, x, 1), 0)
    between = (zeros_so_far == 1) & ~first      # after the first zero, before the second
    after_first = np.sum(np.cumprod(np.where(between, x, 1), axis) * np.where(zeros_so_far == 1, g, 0),
                         axis=axis, keepdims=True)
    at = np.argmax(first, axis=axis, keepdims=True)
    up_to = np.where(at == 0, 1, np.take_along_axis(ans, np.maximum(at - 1, 0), axis))   # the product before it
    return np.where(first, after_first * up_to, out)


def prod_vjp(g, ans, x, axis=None, keepdims=False):
    """torch's rule: g times the product over x where x holds no 0 (g itself for a 0-d x); else
    g times each entry's product of the others, the products before it times those after it
    along the reduced axes (flattened); but 0 everywhere for a product of every entry with two
    or more zeros, as torch.prod(x)'s backward gives (the others' products would hold a 0 too,
    or NaN beside an infinity)."""
    if not x.ndim:
        return g
    g, ans = expand_reduced(g, x.ndim, axis, keepdims), expand_reduced(ans, x.ndim, axis, keepdims)
    zeros = np.count_nonzero(x == 0)
    if not zeros:
        return g * (ans / x)
    if axis is None and zeros > 1:
        return np.zeros(x.shape, g.dtype)
    axes = norm_axes(axis, x.ndim)
    last = tuple(range(x.ndim - len(axes), x.ndim))
    moved = np.moveaxis(x, axes, last)
    rows = moved.reshape(moved.shape[:x.ndim - len(axes)] + (-1,))
    ones = np.ones(rows.shape[:-1] + (1,), rows.dtype)
    before = np.cumprod(np.concatenate([ones, rows[..., :-1]], -1), -1)
    after = np.flip(np.cumprod(np.concatenate([ones, np.flip(rows[..., 1:], -1)], -1), -1), -1)
    return g * np.moveaxis((before * after).reshape(moved.shape), last, axes)


def reversed_logcumsumexp(v, axis):
    return np.flip(np.logaddexp.accumulate(np.flip(v, axis), axis=axis), axis)


def logcumsumexp_vjp(g, ans, x, axis):
    """torch's rule: the positive and the negative parts of g each summed in the log domain,
    log|g| - result (the dtype's lowest number standing for log 0), so that neither overflows;
    an entry whose result is -inf gets NaN, as in torch."""
    lowest = np.finfo(g.dtype).min
    log_abs = np.log(np.abs(g))
    positive = np.exp(reversed_logcumsumexp(np.where(g > 0, log_abs, lowest) - ans, axis) + x)
    negative = np.exp(reversed_logcumsumexp(np.where(g < 0, log_abs, lowest) - ans, axis) + x)
    return positive - negative


def along(x, axis):
    """0, 1, ... n - 1 along axis, shaped to broadcast against x."""
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    return np.arange(x.shape[axis]).reshape(shape)


def running_arg(accumulate):
    """The index of the running maximum (np.maximum) or minimum along axis, as torch's cummax
    and cummin give it: a later tie takes over, and a NaN, once met, is the running value
    whose index the next NaN takes."""
    def forward(x, axis):
        running = accumulate.accumulate(x, axis=axis)
        hit = (x == running) | (x != x)
        return np.maximum.accumulate(np.where(hit, along(x, axis), 0), axis=axis)
    return forward


def argsort(x, axis=-1, descending=False):
    """A stable argsort (ties in index order), NaN above everything, as torch.sort(stable=True):
    descending sorts x reversed and reverses the order found, so ties stay first-come."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    return n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)


def searchsorted(boundaries, x, right=False):
    """Where each x would go in the sorted last axis of boundaries: the first place whose entry is
    at or above it (right: above it). torch's binary search, step for step, on every x at once, so
    a NaN anywhere lands where torch's lands it (a NaN x past the end)."""
    n = boundaries.shape[-1]
    low, high = np.zeros(np.shape(x), np.int64), np.full(np.shape(x), n, np.int64)
    for _ in range(n.bit_length()):   # each step leaves at most half of high - low
        mid = (low + high) >> 1
        at = np.minimum(mid, n - 1)
        entry = boundaries[at] if boundaries.ndim == 1 else np.take_along_axis(boundaries, at, -1)
        past = ~(entry > x) if right else ~(entry >= x)
        searching = low < high
        low, high = np.where(searching & past, mid + 1, low), np.where(searching & ~past, mid, high)
    return low


# ================================================================ scatters
def scatter_add(x, idx, src, axis):
    check_indices(idx, x.shape[axis])
    out = np.array(x, dtype=np.result_type(x, src))
    np.add.at(out, scattered_at(idx, axis), np.broadcast_to(src, np.shape(idx)))   # repeated places add up
    return out


def last_writes(where, shape):
    """(flat places in x, flat positions in idx) of the writes that stand: of repeated places, the
    last one along the axis, as torch's CPU kernel writes each slice in order."""
    places = np.ravel_multi_index(tuple(np.broadcast_arrays(*where)), shape).ravel()
    _, first_from_end = np.unique(places[::-1], return_index=True)
    kept = places.size - 1 - first_from_end
    return places[kept], kept


def scatter(x, idx, src, axis):
    check_indices(idx, x.shape[axis])
    out = np.array(x, dtype=np.result_type(x, src))
    places, kept = last_writes(scattered_at(idx, axis), x.shape)
    np.put(out, places, np.broadcast_to(src, np.shape(idx)).reshape(-1)[kept])   # out may be in column order
    return out


def scatter_vjp_x(g, ans, x, idx, src, axis):
    """g where nothing was written (torch's grad.scatter(dim, index, 0))."""
    written = np.zeros(np.shape(g), dtype=bool)
    written[scattered_at(idx, axis)] = True
    return np.where(written, 0, g)


def scatter_vjp_src(g, ans, x, idx, src, axis):
    """g at each entry's place (torch's grad.gather(dim, index)): every one of repeated indices
    gets it, the write that stood and those it overwrote alike."""
    return g[scattered_at(idx, axis)]


REDUCERS = {"amax": np.maximum, "amin": np.minimum, "prod": np.multiply}


def unit(reduce: str, dtype):
    """What a reduction starts from where include_self=False leaves x's own entry out."""
    if reduce == "prod":
        return 1
    if dtype.kind == "f":
        return -np.inf if reduce == "amax" else np.inf
    return np.iinfo(dtype).min if reduce == "amax" else np.iinfo(dtype).max


def scatter_reduce(x, idx, src, axis, reduce, include_self=True):
    """x with src reduced into it at idx along axis (amax, amin or prod), x's own entry counted
    where include_self; NaN wins a maximum or minimum, as torch's."""
    check_indices(idx, x.shape[axis])
    out = np.array(x, dtype=np.result_type(x, src))
    at = scattered_at(idx, axis)
    if not include_self:
        out[at] = unit(reduce, out.dtype)
    REDUCERS[reduce].at(out, at, np.broadcast_to(src, np.shape(idx)))
    return out


def unwritten(grad, idx, axis, include_self):
    """x's gradient, 0 where src was written when x's own entry was left out (torch's grad.scatter(dim,
    index, 0))."""
    return grad if include_self else scatter_vjp_x(grad, None, None, idx, None, axis)


def shared_extreme(g, ans, x, idx, src, axis):
    """torch's amax / amin rule: g split evenly among x's entry and the src entries equal to the
    result (x's counted even where include_self leaves it out, as torch's): (x's share, src's)."""
    at = scattered_at(idx, axis)
    x_hit, src_hit = (x == ans).astype(g.dtype), (np.broadcast_to(src, np.shape(idx)) == ans[at]).astype(g.dtype)
    count = x_hit.copy()
    np.add.at(count, at, src_hit)
    share = g / count
    return x_hit * share, src_hit * share[at]


def scatter_reduce_vjp_x(g, ans, x, idx, src, axis, reduce, include_self=True):
    """amax / amin: x's share of the ties; prod: g times the product of what was reduced into x's
    entry, computed with x's zeros read as ones (torch's, exact beside zeros)."""
    if reduce != "prod":
        grad = shared_extreme(g, ans, x, idx, src, axis)[0]
    else:
        ones = np.where(x == 0, 1, x)
        grad = g * scatter_reduce(ones, idx, src, axis, reduce, include_self) / ones
    return unwritten(grad, idx, axis, include_self)


def scatter_reduce_vjp_src(g, ans, x, idx, src, axis, reduce, include_self=True):
    """amax / amin: src's share of the ties; prod: torch's rule, g times the result over the entry,
    but for the only zero of its place g times the product of the others."""
    if reduce != "prod":
        return shared_extreme(g, ans, x, idx, src, axis)[1]
    at, src = scattered_at(idx, axis), np.broadcast_to(src, np.shape(idx))
    zero = src == 0
    zeros = np.zeros(x.shape, dtype=g.dtype)
    np.add.at(zeros, at, zero)
    alone = zero & (zeros[at] == 1)
    others = scatter_reduce(x, idx, np.where(alone, 1, src), axis, reduce, include_self)
    return np.where(alone, (g * others)[at], (g * ans)[at] / np.where(zero, 1, src))
