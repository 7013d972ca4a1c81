"""Array code of the scans, sorts and scatters: cumprod's and logcumsumexp's gradients, the
running arg-max, a stable argsort, scatter and scatter_add.

Each follows PyTorch: its CPU kernels where the order of work decides a result (which of
tied entries a running maximum or a sort returns, which of repeated scatter indices is
written), its gradient formulas where precision or a zero is at stake.
"""

from __future__ import annotations

import numpy as np

from gradflow.engine.kernels import check_indices, scattered_at

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
