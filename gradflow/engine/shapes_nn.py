"""Shape rules of the neural-network ops: losses, normalisation, convolution and pooling,
embedding, attention, linear. As in ``shapes.py``, none allocates an array, and each
raises ShapeError naming the op and the shapes.
"""

from __future__ import annotations

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


def window_scratch(out, x, w=None, kernel=None, **attrs) -> int:
    """Elements of the window copy a conv2d or pool makes: every output position times
    the window it reads (times the input channels, for a convolution)."""
    size = 1
    for n in out:
        size *= n
    if w is not None:                        # conv2d: out [N, O, Ho, Wo], w [O, C, kH, kW]
        return size // max(out[1], 1) * w[1] * w[2] * w[3]
    kh, kw = pair(kernel, "kernel", 1)
    return size * kh * kw


# ---------------------------------------------------------------- ops of imported models
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
