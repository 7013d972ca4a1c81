"""Shape rules of the neural-network ops: losses, normalisation, convolution and pooling,
embedding, attention, linear. As in ``shapes.py``, none allocates an array, and each
raises ShapeError naming the op and the shapes.
"""

from __future__ import annotations

import math

from gradflow.engine.shapes import broadcast_shape, fmt, is_int, norm_axis
from gradflow.errors import ShapeError


def loss_shape(a, b):
    broadcast_shape(a, b)  # raises on a mismatch
    return ()


def bce_shape(p, y, reduction="mean"):
    shape = broadcast_shape(p, y)   # raises on a mismatch
    return shape if reduction == "none" else ()


def layer_norm_shape(x, gamma, beta, eps=1e-5):
    if not x:
        raise ShapeError("layer_norm of a scalar: needs at least one axis")
    for name, s in (("gamma", gamma), ("beta", beta)):
        if s != x[-1:]:
            raise ShapeError(f"layer_norm of {fmt(x)} with {name} {fmt(s)}: {name} must be {fmt(x[-1:])}")
    return x


def cross_entropy_shape(logits, labels, ignore_index=None):
    if ignore_index is not None and not is_int(ignore_index):
        raise ShapeError(f"cross_entropy's ignore_index must be an integer label, got {ignore_index!r}")
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


AXES = {2: "H, W", 3: "D, H, W"}   # the spatial axes of a 2-d and a 3-d convolution or pool
COUNTS = {2: "pair", 3: "triple"}


def spatial(v, k, what, least) -> tuple:
    """An int or k ints (one per spatial axis), each at least ``least``."""
    if v.__class__ is int and v >= least:   # the common case, on every call of a kernel: no more checks
        return (v,) * k
    out = (v,) * k if is_int(v) else tuple(v)
    if len(out) != k or not all(is_int(n) and n >= least for n in out):
        raise ShapeError(f"{what} must be an integer >= {least} or a {COUNTS[k]} of them, got {v!r}")
    return out


def pair(v, what, least) -> tuple[int, int]:
    """An int or a pair of ints (height, width), each at least ``least``."""
    return spatial(v, 2, what, least)


def conv_shape(k: int):
    """The shape rule of the k-d convolution: x [N, C, *spatial], w [O, C, *kernel]."""
    kernel = ", ".join("k" + a for a in AXES[k].split(", "))

    def rule(x, w, stride=1, padding=0):
        where = f"conv{k}d of {fmt(x)} and {fmt(w)}"
        if len(x) != k + 2 or len(w) != k + 2:
            raise ShapeError(f"{where}: input must be [N, C, {AXES[k]}] and weight [O, C, {kernel}]")
        if x[1] != w[1]:
            raise ShapeError(f"{where}: {x[1]} input channels != {w[1]}")
        strides, pads = spatial(stride, k, "stride", 1), spatial(padding, k, "padding", 0)
        sizes = tuple(n + 2 * p for n, p in zip(x[2:], pads))
        if any(kn > n for kn, n in zip(w[2:], sizes)):
            raise ShapeError(f"{where}: kernel {fmt(w[2:])} is larger than the padded input {fmt(sizes)}")
        return (x[0], w[0]) + tuple((n - kn) // s + 1 for n, kn, s in zip(sizes, w[2:], strides))
    return rule


conv2d_shape = conv_shape(2)


def pool_shape_of(k: int):
    """The shape rule of a k-d pool over the last k axes; stride defaults to the kernel."""
    def rule(x, kernel, stride=None):
        if len(x) < k:
            raise ShapeError(f"pooling of {fmt(x)}: needs [..., {AXES[k]}]")
        kernel = spatial(kernel, k, "kernel", 1)
        strides = spatial(kernel if stride is None else stride, k, "stride", 1)
        if any(kn > n for kn, n in zip(kernel, x[-k:])):
            raise ShapeError(f"kernel {fmt(kernel)} is larger than the input {fmt(x[-k:])}")
        return x[:-k] + tuple((n - kn) // s + 1 for n, kn, s in zip(x[-k:], kernel, strides))
    return rule


pool_shape = pool_shape_of(2)


def window_scratch(out, x, w=None, kernel=None, k=2, **attrs) -> int:
    """Elements of the window copy a convolution or a k-d pool makes: every output position
    times the window it reads (times the input channels, for a convolution)."""
    size = math.prod(out)
    if w is not None:                        # a convolution: out [N, O, *spatial], w [O, C, *kernel]
        return size // max(out[1], 1) * math.prod(w[1:])
    return size * math.prod(spatial(kernel, k, "kernel", 1))


def window_scratch_3d(out, x, kernel=None, **attrs) -> int:
    return window_scratch(out, x, kernel=kernel, k=3)


# ---------------------------------------------------------------- ops of imported models
def grid_sample_shape(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False):
    where = f"grid_sample of {fmt(x)} at grid {fmt(grid)}"
    k = len(x) - 2
    if k not in (2, 3) or len(grid) != len(x) or grid[-1] != k:
        raise ShapeError(f"{where}: needs x [N, C, H, W] and grid [N, Ho, Wo, 2], or x [N, C, D, H, W] "
                         "and grid [N, Do, Ho, Wo, 3]")
    if grid[0] != x[0]:
        raise ShapeError(f"{where}: {x[0]} != {grid[0]} samples")
    if not all(x[2:]):
        raise ShapeError(f"{where}: the input has no entries to read")
    return x[:2] + grid[1:-1]


def embedding_shape(idx, weight, padding_idx=None):
    if len(weight) != 2:
        raise ShapeError(f"embedding of {fmt(idx)} in weight {fmt(weight)}: weight must be [rows, dim]")
    if padding_idx is not None and not (is_int(padding_idx) and -weight[0] <= padding_idx < weight[0]):
        raise ShapeError(f"embedding's padding_idx must be a row of weight {fmt(weight)} "
                         f"(-{weight[0]} to {weight[0] - 1}), got {padding_idx!r}")
    return tuple(idx) + weight[1:]


def batch_norm_shape(x, gamma, beta, eps=1e-5):
    if len(x) < 2:
        raise ShapeError(f"batch_norm of {fmt(x)}: needs [N, C, ...]")
    for name, s in (("gamma", gamma), ("beta", beta)):
        if s != x[1:2]:
            raise ShapeError(f"batch_norm of {fmt(x)} with {name} {fmt(s)}: {name} must be {fmt(x[1:2])}")
    return x


def attention_shape(q, k, v, mask=None, is_causal=False, scale=None):
    where = f"attention of q {fmt(q)}, k {fmt(k)}, v {fmt(v)}"
    if min(len(q), len(k), len(v)) < 2 or q[-1] != k[-1] or k[-2] != v[-2]:
        raise ShapeError(f"{where}: needs q [..., L, E], k [..., S, E] and v [..., S, Ev]")
    try:
        batch = broadcast_shape(q[:-2], k[:-2], v[:-2])
        if mask is not None:
            broadcast_shape(mask, batch + (q[-2], k[-2]))
    except ShapeError:
        raise ShapeError(f"{where}" + (f", mask {fmt(mask)}" if mask is not None else "")
                         + ": batch axes do not broadcast") from None
    return batch + (q[-2], v[-1])


def masked_attention_shape(q, k, v, mask, scale=None):
    return attention_shape(q, k, v, mask, scale=scale)


def cosine_similarity_shape(a, b, axis=1, eps=1e-8):
    shape = broadcast_shape(a, b)
    return shape[:norm_axis(axis, len(shape))] + shape[norm_axis(axis, len(shape)) + 1:]


def linear_shape(x, w, b):
    if len(w) != 2 or not x or x[-1] != w[1] or b != w[:1]:
        raise ShapeError(f"linear of {fmt(x)} with weight {fmt(w)} and bias {fmt(b)}: needs x [..., in], "
                         "weight [out, in] and bias [out]")
    return x[:-1] + w[:1]
