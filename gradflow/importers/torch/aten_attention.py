"""aten's scaled_dot_product_attention -> gradflow expressions: boolean, additive and causal masks
(a query that keeps no key gets zeros, as torch's), grouped-query heads (enable_gqa) and dropout
in training mode."""

from __future__ import annotations

import math

from gradflow.importers.torch.aten_layout import band, interleaved
from gradflow.importers.torch.call import Unsupported, text

# A masked score's finite stand-in for -inf: any score less it has exp 0, so the kept ones stay
# exact, and float32 holds it (-1e300 is -inf there: a row masked out entirely was NaN, not zeros)
MASKED = "-1e30"


def attention(c):
    q, k, v = c.args[:3]
    mask, dropout, causal = c.arg(3, "attn_mask"), c.arg(4, "dropout_p", 0.0), c.arg(5, "is_causal", False)
    scale = c.kwargs.get("scale", c.args[6] if len(c.args) > 6 else None)
    if c.kwargs.get("enable_gqa"):
        k, v = (heads_repeated(c, x, i) for i, x in ((1, k), (2, v)))
    tail = f", scale={scale!r}" if scale is not None else ""
    if mask is not None and causal:
        raise Unsupported("with both attn_mask and is_causal")
    if dropout:
        return dropped_attention(c, q, k, v, mask, causal, scale, dropout)
    if mask is None:
        return f"scaled_dot_product_attention({q}, {k}, {v}, is_causal={bool(causal)}{tail})"
    added, kept = masks(c, mask)
    return f"masked_attention({q}, {k}, {v}, {added}{tail}) * max({kept}, axis=-1, keepdims=True)"


def masks(c, mask) -> tuple:
    """(what the scores add, which keys each query keeps) for attn_mask: gradflow holds booleans as
    0/1 floats, so a boolean mask becomes additive; a float mask's -inf takes the finite stand-in.
    A query that keeps no key gets zeros and no gradient, as torch's softmax of a fully masked row."""
    if c.kinds.get(3, c.kinds.get("attn_mask")) == "bool":
        return f"where({mask}, 0.0, {MASKED})", mask
    kept = c.line(f"not_equal({mask}, log(0.0))", "kept")
    return f"where({kept}, {mask}, {MASKED})", kept


def heads_repeated(c, x: str, i: int) -> str:
    """enable_gqa: the keys' or values' heads (axis -3) each repeated to the queries' count, as
    torch's repeat_interleave (which refuses enable_gqa below three axes)."""
    shape = list(c.shapes[i])
    groups = c.shapes[0][-3] // shape[-3]
    return x if groups == 1 else interleaved(x, shape, len(shape) - 3, groups)


def dropped_attention(c, q, k, v, mask, causal: bool, scale, p: float) -> str:
    """Attention in training mode with dropout_p, as torch's math: softmax(q k^T scale + mask), its
    weights dropped (gradflow's own seeded mask, as nn.Dropout's), times v; masks as ``masks``."""
    nk = c.ndim(1)
    swap = tuple(range(nk - 2)) + (nk - 1, nk - 2)
    scale = 1 / math.sqrt(c.shapes[0][-1]) if scale is None else scale
    scores = f"({q} @ transpose({k}, axes={text(swap)})) * {scale!r}"
    kept = None
    if causal:
        scores = f"where({band(c.shapes[0][-2], c.shapes[1][-2], 0, False)}, {scores}, {MASKED})"
    elif mask is not None:
        added, kept = masks(c, mask)
        scores = f"{scores} + {added}"
    weights = c.line(f"dropout(softmax({scores}, axis=-1), {p!r})", "weights")
    out = f"{weights} @ {v}"
    return out if kept is None else f"({out}) * max({kept}, axis=-1, keepdims=True)"


ATTENTION_OPS = {"scaled_dot_product_attention": attention}
