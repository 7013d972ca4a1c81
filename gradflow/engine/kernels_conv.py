"""Array code of convolution and pooling over sliding windows of the last two or three axes.

One function serves 2-d and 3-d alike: a convolution takes its number of spatial axes from its
weight, a pool is told it (``k``). Each gradient follows PyTorch's: a max pool's tie goes to the
first maximal tap of its window, a window holding NaN gives it to its last NaN (torch's kernel
takes every NaN it meets), and overlapping windows add their shares.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from gradflow.engine.shapes_nn import spatial

EVERY = slice(None)
LAST = {2: (-2, -1), 3: (-3, -2, -1)}   # the window axes of a k-d op


def padded(x, padding, k):
    pads = spatial(padding, k, "padding", 0)
    return np.pad(x, ((0, 0), (0, 0)) + tuple((p, p) for p in pads)) if any(pads) else x


def windows(x, kernel, stride, k=2):
    """Every window of the last k axes, strided: a view (..., *out, *kernel)."""
    kernel, stride = spatial(kernel, k, "kernel", 1), spatial(stride, k, "stride", 1)
    view = sliding_window_view(x, kernel, axis=LAST[k])
    return view[(Ellipsis, *[slice(None, None, s) for s in stride]) + (EVERY,) * k]


def taps(kernel, stride, sizes):
    """(offset, slices) of each tap of a window, row-major: the slices, one per spatial axis, that
    the tap of every window reads. Made by axis, then combined, so a tap costs one tuple."""
    ranges = [range(k) for k in kernel]
    reads = [[slice(i, i + s * (n - 1) + 1, s) for i in r] for r, s, n in zip(ranges, stride, sizes)]
    return zip(itertools.product(*ranges), itertools.product(*reads))


def conv(x, w, stride=1, padding=0):
    k = w.ndim - 2
    cols = windows(padded(x, padding, k), w.shape[2:], stride, k)             # N, C, *out, *kernel
    out = np.tensordot(cols, w, axes=([1, *range(k + 2, 2 * k + 2)], [*range(1, k + 2)]))   # N, *out, O
    return np.ascontiguousarray(out.transpose(0, k + 1, *range(1, k + 1)))


def conv_vjp_w(g, ans, x, w, stride=1, padding=0):
    k = w.ndim - 2
    cols = windows(padded(x, padding, k), w.shape[2:], stride, k)
    return np.tensordot(g, cols, axes=([0, *range(2, k + 2)], [0, *range(2, k + 2)]))


def conv_vjp_x(g, ans, x, w, stride=1, padding=0):
    k = w.ndim - 2
    stride, pads = spatial(stride, k, "stride", 1), spatial(padding, k, "padding", 0)
    parts = np.tensordot(g, w, axes=([1], [0]))                                 # N, *out, C, *kernel
    out = np.zeros(x.shape[:2] + tuple([n + 2 * p for n, p in zip(x.shape[2:], pads)]), dtype=g.dtype)
    order = (0, k + 1, *range(1, k + 1))
    for offset, at in taps(w.shape[2:], stride, g.shape[2:]):  # each kernel offset scatters one strided slice
        out[(EVERY, EVERY) + at] += parts[(Ellipsis,) + offset].transpose(order)
    return out[(EVERY, EVERY, *[slice(p, p + n) for p, n in zip(pads, x.shape[2:])])]


def pool_windows(x, kernel, stride, k=2):
    cols = windows(x, kernel, kernel if stride is None else stride, k)
    return cols.reshape(cols.shape[:-k] + (-1,))                               # ..., *out, window


def max_pool_vjp(k):
    def vjp(g, ans, x, kernel, stride=None):
        kernel = spatial(kernel, k, "kernel", 1)
        stride = spatial(kernel if stride is None else stride, k, "stride", 1)
        cols = pool_windows(x, kernel, stride, k)
        tap = np.argmax(cols, axis=-1)                        # ties: the first in the window
        if math.isnan(ans.sum()):                             # NaN somewhere: the window's last NaN, as torch's
            nan = np.isnan(cols)
            tap = np.where(nan.any(axis=-1), cols.shape[-1] - 1 - np.argmax(nan[..., ::-1], axis=-1), tap)
        at, sizes = None, g.shape[-k:]
        for a, (offset, s) in enumerate(zip(np.unravel_index(tap, kernel), stride)):   # flat place in x's window axes
            lined = np.arange(0, sizes[a] * s, s).reshape((-1,) + (1,) * (k - 1 - a)) + offset
            at = lined if at is None else at * x.shape[x.ndim - k + a] + lined
        count = math.prod(sizes)
        flat_g, flat_at = g.reshape(-1, count), at.reshape(-1, count)
        out = np.zeros((flat_g.shape[0], math.prod(x.shape[-k:])), dtype=g.dtype)
        np.add.at(out, (np.arange(out.shape[0])[:, None], flat_at), flat_g)  # windows may overlap
        return out.reshape(x.shape)
    return vjp


def avg_pool_vjp(k):
    def vjp(g, ans, x, kernel, stride=None):
        kernel = spatial(kernel, k, "kernel", 1)
        stride = spatial(kernel if stride is None else stride, k, "stride", 1)
        out = np.zeros(x.shape, dtype=g.dtype)
        share = g / math.prod(kernel)
        for _, at in taps(kernel, stride, g.shape[-k:]):
            out[(Ellipsis,) + at] += share
        return out
    return vjp
