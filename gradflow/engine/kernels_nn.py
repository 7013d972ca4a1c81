"""Array code of the ops that models imported from PyTorch need: exact GELU, SiLU, erf,
embedding, batch norm (training mode), attention, cosine similarity, linear, dropout and
the random draws.

Each forward and vector-Jacobian product follows PyTorch's definition, so gradients
of an imported model equal torch.autograd's on the same inputs.
"""

from __future__ import annotations

import math

import numpy as np

from gradflow.engine.kernels import check_indices, sigmoid

SQRT_HALF = math.sqrt(0.5)
INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)


def libm(fn):
    """libm's ``fn`` (exact to the last bit) over an array, in its float dtype (float32 stays float32)."""
    each = np.vectorize(fn, otypes=[np.float64])
    return lambda x: each(x).astype(np.result_type(x, np.float32), copy=False)


erf = libm(math.erf)
erfc = libm(math.erfc)   # 1 - erf(x) would lose the tail


def erf_vjp(g, ans, x):
    return g * (TWO_OVER_SQRT_PI * np.exp(-x * x))


def gelu_exact(x):
    return x * 0.5 * (1 + erf(x * SQRT_HALF))


def gelu_exact_vjp(g, x):
    cdf = 0.5 * (1 + erf(x * SQRT_HALF))
    return g * (cdf + x * INV_SQRT_2PI * np.exp(-0.5 * x * x))


def silu(x):
    return x * sigmoid(x)


def silu_vjp(g, ans, x):
    s = sigmoid(x)
    return g * (s * (1 + x * (1 - s)))


# ---------------------------------------------------------------- embedding
def embedding(idx, weight, padding_idx=None):
    check_indices(idx, weight.shape[0])
    return weight[idx]


def embedding_vjp(g, ans, idx, weight, padding_idx=None):
    out = np.zeros(weight.shape, dtype=g.dtype)
    np.add.at(out, idx, g)
    if padding_idx is not None:
        # torch's padding_idx: that row's value is read as it is, but it is never trained
        out[padding_idx] = 0
    return out


# ---------------------------------------------------------------- batch norm
def batch_axes(x) -> tuple:
    return tuple(a for a in range(np.ndim(x)) if a != 1)


def channel(v, x):
    """A per-channel vector shaped to broadcast against x [N, C, ...]."""
    return np.reshape(v, (1, -1) + (1,) * (np.ndim(x) - 2))


def batch_normalised(x, eps):
    axes = batch_axes(x)
    mean = np.mean(x, axis=axes, keepdims=True)
    inv = 1 / np.sqrt(np.var(x, axis=axes, keepdims=True) + eps)
    return (x - mean) * inv, inv


def batch_norm(x, gamma, beta, eps=1e-5):
    xhat, _ = batch_normalised(x, eps)
    return xhat * channel(gamma, x) + channel(beta, x)


def batch_norm_vjp_x(g, ans, x, gamma, beta, eps=1e-5):
    xhat, inv = batch_normalised(x, eps)
    axes = batch_axes(x)
    gx = g * channel(gamma, x)
    return inv * (gx - np.mean(gx, axis=axes, keepdims=True)
                  - xhat * np.mean(gx * xhat, axis=axes, keepdims=True))


def batch_norm_vjp_gamma(g, ans, x, gamma, beta, eps=1e-5):
    return np.sum(g * batch_normalised(x, eps)[0], axis=batch_axes(x))


def batch_norm_vjp_beta(g, ans, x, gamma, beta, eps=1e-5):
    return np.sum(g, axis=batch_axes(x))


# ---------------------------------------------------------------- attention
def attention_weights(q, k, mask, is_causal, scale):
    """softmax(q k^T * scale + mask) over the last axis; the mask as torch reads it."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if is_causal:   # torch's is_causal: the top-left triangle, tril(ones(L, S))
        length, source = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((length, source), dtype=bool)), scores, -np.inf)
    if mask is not None:
        scores = np.where(mask != 0, scores, -np.inf) if mask.dtype.kind in "biu" else scores + mask
    top = np.max(scores, axis=-1, keepdims=True)
    e = np.exp(scores - top)   # a fully masked row is NaN, as in torch
    return e / np.sum(e, axis=-1, keepdims=True), scale


def attention(q, k, v, mask=None, is_causal=False, scale=None):
    return np.matmul(attention_weights(q, k, mask, is_causal, scale)[0], v)


def attention_grads(g, q, k, v, mask, is_causal, scale):
    p, scale = attention_weights(q, k, mask, is_causal, scale)
    dp = np.matmul(g, np.swapaxes(v, -1, -2))
    ds = p * (dp - np.sum(dp * p, axis=-1, keepdims=True))
    return (np.matmul(ds, k) * scale, np.matmul(np.swapaxes(ds, -1, -2), q) * scale,
            np.matmul(np.swapaxes(p, -1, -2), g), ds)


def attention_vjp(which: int, masked: bool):
    """The rule for q (0), k (1), v (2) or a float mask (3, added to the scores) of
    scaled_dot_product_attention / masked_attention."""
    if masked:
        return lambda g, ans, q, k, v, mask, scale=None: attention_grads(g, q, k, v, mask, False, scale)[which]
    return lambda g, ans, q, k, v, is_causal=False, scale=None: \
        attention_grads(g, q, k, v, None, is_causal, scale)[which]


# ---------------------------------------------------------------- cosine similarity, linear
def unit_scale(x, axis, eps):
    """(|x|, max(|x|, eps)) along axis: PyTorch clamps each norm on its own."""
    norm = np.sqrt(np.sum(x * x, axis=axis, keepdims=True))
    return norm, np.maximum(norm, eps)


def cosine_similarity(a, b, axis=1, eps=1e-8):
    _, ca = unit_scale(a, axis, eps)
    _, cb = unit_scale(b, axis, eps)
    return np.sum(a * b, axis=axis) / np.squeeze(ca * cb, axis=axis)


def cosine_vjp(which: int):
    def rule(g, ans, a, b, axis=1, eps=1e-8):
        mine, other = (a, b) if which == 0 else (b, a)
        norm, clamped = unit_scale(mine, axis, eps)
        _, other_clamped = unit_scale(other, axis, eps)
        out, g = np.expand_dims(ans, axis), np.expand_dims(g, axis)
        # PyTorch clamps the norms without recording it, so the norm's own derivative
        # (mine / |mine|, 0 at a zero vector) applies even where the clamp is active.
        direction = np.divide(mine, norm, out=np.zeros_like(mine * norm), where=norm != 0)
        return g * (other / (clamped * other_clamped) - out * direction / clamped)
    return rule


def linear(x, w, b):
    return np.matmul(x, np.swapaxes(w, -1, -2)) + b


def linear_vjp_w(g, ans, x, w, b):
    g2, x2 = g.reshape(-1, g.shape[-1]), x.reshape(-1, x.shape[-1])
    return g2.T @ x2


# ================================================================ dropout
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
