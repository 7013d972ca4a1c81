"""Array code of 2-d convolution and pooling over sliding windows of the last two axes.

Each gradient follows PyTorch's: a max pool's tie goes to the first maximal tap of its window,
and overlapping windows add their shares.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from gradflow.engine.shapes_nn import pair


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
