"""aten neural-network ops and losses -> gradflow expressions (activations, norms, losses;
convolutions and pools from aten_conv, attention from aten_attention)."""

from __future__ import annotations

from gradflow.importers.torch.aten_attention import ATTENTION_OPS
from gradflow.importers.torch.aten_conv import CONV_OPS
from gradflow.importers.torch.call import Alias, Unsupported, index_text, shape_text, text


def class_loss(c, logp: str, what: str, smoothing: float = 0.0) -> str:
    """-logp[label] per position (blended with -mean(logp) by label_smoothing), over [N, C] or
    [N, C, d1, ...] and [N] or [N, d1, ...] labels; positions labelled ignore_index count for nothing,
    whatever the labels are when the model runs (not only the traced example's). A class weight
    scales each position by its label's weight and the smoothing term class by class, and the mean
    divides by the kept labels' weights, as torch's."""
    weight, reduction, ignore = c.arg(2, "weight"), c.arg(3, "reduction", 1), c.arg(4, "ignore_index", -100)
    if c.ndim() < 2 or c.ndim(1) != c.ndim() - 1 or c.kinds.get(1) not in ("int", None):
        raise Unsupported(f"beyond [N, C] or [N, C, d1, ...] {what} and [N] or [N, d1, ...] class labels")
    classes, labels = c.shapes[0][1], c.shapes[1]
    rows = 1
    for n in labels:
        rows *= n
    y = c.args[1] if c.ndim() == 2 else f"reshape({c.args[1]}, [{rows}])"
    if c.ndim() > 2:   # the class axis last, one row per position
        logp = f"reshape(transpose({logp}, axes={(0, *range(2, c.ndim()), 1)!r}), [{rows}, {classes}])"
    keep = f"not_equal({y}, {ignore})"
    safe = f"where({keep}, {y}, argmax(expand_dims({y}, 1), axis=1))"   # an ignored label read as class 0
    picked = f"reshape(take_along_axis({logp}, expand_dims({safe}, 1), axis=1), [{rows}])"
    counted, spread = keep, f"sum({logp}, axis=1)"
    if weight is not None:
        picked = f"{picked} * take({weight}, {safe}, axis=0)"
        counted, spread = f"where({keep}, take({weight}, {safe}, axis=0), 0.0)", f"sum({logp} * {weight}, axis=1)"
    per = f"-{picked}" if not smoothing else f"-{picked} * {1 - smoothing!r} - {spread} * {smoothing / classes!r}"
    # where selects: an ignored row gets no gradient, even when every row is (torch's mean is then nan)
    per = f"where({keep}, {per}, 0.0)"
    if reduction == 0:
        return per if c.ndim() == 2 else f"reshape({per}, {shape_text(labels)})"
    return f"sum({per})" if reduction == 2 else f"sum({per}) / sum({counted})"


def probability_loss(c, smoothing: float) -> str:
    """Cross entropy against class probabilities (soft labels: distillation, mixup): -sum over the
    classes of target * log_softmax, the target blended with the uniform by label_smoothing, each
    class scaled by its weight; the mean is over the positions, whatever the weights, as torch's."""
    weight, reduction = c.arg(2, "weight"), c.arg(3, "reduction", 1)
    classes = c.shapes[0][1]
    target = c.args[1] if not smoothing else f"({c.args[1]} * {1 - smoothing!r} + {smoothing / classes!r})"
    product = f"log_softmax({c.args[0]}, axis=1) * {target}"
    if weight is not None:
        product = f"{product} * reshape({weight}, {shape_text((1, classes) + (1,) * (c.ndim() - 2))})"
    if reduction == 0:
        return f"-sum({product}, axis=1)"
    positions = 1
    for n in c.shapes[0]:
        positions *= n
    return f"-sum({product})" if reduction == 2 else f"-sum({product}) / {positions // classes}"


def cross_entropy(c):
    smoothing = c.arg(5, "label_smoothing", 0.0)
    if c.kinds.get(1) == "float" and c.ndim() >= 2 and tuple(c.shapes[1]) == tuple(c.shapes[0]):
        return probability_loss(c, smoothing)
    plain = c.arg(2, "weight") is None and c.arg(3, "reduction", 1) == 1 and not smoothing and c.ndim() == 2
    if plain and c.ndim(1) == 1 and c.kinds.get(1) in ("int", None):
        return f"cross_entropy({c.args[0]}, {c.args[1]}, ignore_index={c.arg(4, 'ignore_index', -100)})"
    return class_loss(c, f"log_softmax({c.args[0]}, axis=1)", "logits", smoothing)


def nll(c):
    return class_loss(c, c.args[0], "log-probabilities")


def reduced(expr: str, reduction: int) -> str:
    return {0: expr, 1: f"mean({expr})", 2: f"sum({expr})"}[reduction]


def mse(c):
    reduction = c.arg(2, "reduction", 1)
    return f"mse({c.args[0]}, {c.args[1]})" if reduction == 1 else \
        reduced(f"square({c.args[0]} - {c.args[1]})", reduction)


def bce_logits(c):
    """torch's (1 - y) x - (1 + (pos_weight - 1) y) log sigmoid(x), times weight, written so that its
    gradient is torch's own (1 + (pos_weight - 1) y) sigmoid(x) - pos_weight y: 0 where sigmoid(x) is 1."""
    x, y, weight, pos_weight = c.args[0], c.args[1], c.arg(2, "weight"), c.arg(3, "pos_weight")
    per = f"softplus({x}) - {x} * {y}" if pos_weight is None else \
        f"(1 + ({pos_weight} - 1) * {y}) * softplus({x}) - {pos_weight} * {y} * {x}"
    return reduced(per if weight is None else f"({per}) * {weight}", c.arg(4, "reduction", 1))


def bce(c):
    """gradflow's op, whose gradient is torch's rule where p(1 - p) < 1e-12 too (the logs' own
    gradient is not there); each position's loss (reduction='none') times the weight."""
    p, y, weight, reduction = c.args[0], c.args[1], c.arg(2, "weight"), c.arg(3, "reduction", 1)
    if weight is None:
        return f"binary_cross_entropy({p}, {y}{BCE_REDUCTION[reduction]})"
    return reduced(f"binary_cross_entropy({p}, {y}, reduction='none') * {weight}", reduction)


BCE_REDUCTION = {0: ", reduction='none'", 1: "", 2: ", reduction='sum'"}


def clipped_square(x, y, delta) -> str:
    """Huber's 0.5 d ** 2 for |d| <= delta, delta (|d| - delta / 2) beyond (d = x - y), written
    k (d - k / 2) with k = d clipped to [-delta, delta]: its gradient is k, torch's at |d| == delta
    too, and delta (no inf * 0) for an infinite d, as clip passes no gradient outside its range."""
    d = f"({x} - {y})"
    k = f"clip({d}, {-delta!r}, {delta!r})"
    return f"{k} * ({d} - {k} * 0.5)"


def huber(c):
    return reduced(clipped_square(c.args[0], c.args[1], c.arg(3, "delta", 1.0)), c.arg(2, "reduction", 1))


def smooth_l1(c):
    """Huber over beta (F.smooth_l1_loss with beta=0 is exported as l1_loss)."""
    x, y, reduction, beta = c.args[0], c.args[1], c.arg(2, "reduction", 1), c.arg(3, "beta", 1.0)
    if beta == 0:
        raise Unsupported("with beta=0 as aten's own op (its gradient at a zero difference is -1 into both "
                          "input and target; F.smooth_l1_loss(beta=0) is the l1 loss and imports)")
    return reduced(f"{clipped_square(x, y, beta)} / {beta!r}", reduction)


def xlogy(x: str, y: str) -> str:
    """x log(y), 0 where x == 0 and y is not NaN: gradflow's xlogy, whose gradients are torch's."""
    return f"xlogy({x}, {y})"


def kl_div(c):
    """target (log target - input) at each position, input log-probabilities: exp(t) (t - input) for
    a log target, else torch's xlogy(t, t) - t input, 0 where t == 0; batchmean is exported as the
    sum divided by the batch."""
    x, t, reduction = c.args[0], c.args[1], c.arg(2, "reduction", 1)
    per = f"exp({t}) * ({t} - {x})" if c.arg(3, "log_target", False) else f"{xlogy(t, t)} - {t} * {x}"
    return reduced(per, reduction)


def normalized(x: str, axis, eps) -> str:
    """(x - mean) / sqrt(biased var + eps) over axis, as torch's norms."""
    return (f"({x} - mean({x}, axis={axis}, keepdims=True)) / sqrt(var({x}, axis={axis}, keepdims=True) + {eps!r})")


def affine(expr: str, w, b, shape) -> str:
    """expr * w + b, each of w and b broadcast as ``shape`` (either may be None)."""
    if w is not None:
        expr = f"{expr} * {w if shape is None else f'reshape({w}, {shape})'}"
    if b is not None:
        expr = f"{expr} + {b if shape is None else f'reshape({b}, {shape})'}"
    return expr


def linear_of(x: str, w: str, b) -> str:
    """x @ w.T (+ b), as torch's linear: gradflow's own linear when there is a bias."""
    return f"linear({x}, {w}, {b})" if b is not None else f"{x} @ transpose({w})"


def layer_norm(c):
    shape, w, b, eps = c.args[1], c.arg(2, "weight"), c.arg(3, "bias"), c.arg(4, "eps", 1e-5)
    if len(shape) == 1 and w is not None and b is not None:
        return f"layer_norm({c.args[0]}, {w}, {b}, eps={eps!r})"
    axis = tuple(range(c.ndim() - len(shape), c.ndim()))
    return affine(normalized(c.args[0], axis[0] if len(axis) == 1 else axis, eps), w, b, None)


def batch_norm(c):
    x, w, b, mean, var, training, _, eps = (c.args + [None] * 9)[:8]
    s = shape_text([c.shapes[0][1]] + [1] * (c.ndim() - 2))
    if training or mean is None:
        if w is not None and b is not None:
            return f"batch_norm({x}, {w}, {b}, eps={eps!r})"
        return affine(normalized(x, tuple(a for a in range(c.ndim()) if a != 1), eps), w, b, s)
    return affine(f"({x} - reshape({mean}, {s})) / sqrt(reshape({var}, {s}) + {eps!r})", w, b, s)


def group_norm(c):
    x, groups, w, b, eps = c.args[0], c.args[1], c.arg(2, "weight"), c.arg(3, "bias"), c.arg(4, "eps", 1e-5)
    shape = c.shapes[0]
    grouped = f"reshape({x}, [{shape[0]}, {groups}, -1])"
    s = shape_text([shape[1]] + [1] * (c.ndim() - 2))
    return affine(f"reshape({normalized(grouped, 2, eps)}, {shape_text(shape)})", w, b, s)


def hardswish(c):
    """x (clip(x, -3, 3) + 3) / 6 with hardtanh as the clip: its gradient stops at -3 and 3, so
    the slope there is torch's, 0 and 1."""
    return f"{c.args[0]} * (hardtanh({c.args[0]}, lo=-3.0, hi=3.0) + 3) / 6"


def glu(c):
    """The first half along dim times the sigmoid of the second."""
    x, nd = c.args[0], c.ndim()
    dim = c.arg(1, "dim", -1) % nd
    half = c.shapes[0][dim] // 2
    return f"{x}{index_text(nd, dim, f':{half}')} * sigmoid({x}{index_text(nd, dim, f'{half}:')})"


def prelu(c):
    """x where x > 0, else weight * x: one weight, or one per channel (axis 1; torch refuses them
    for an input without one)."""
    x, w, n = c.args[0], c.args[1], c.shapes[1][0] if c.shapes[1] else 1
    if n > 1:
        w = f"reshape({w}, {shape_text([n] + [1] * (c.ndim() - 2))})"
    return f"where(greater({x}, 0), {x}, {w} * {x})"


def embedding(c):
    if c.arg(3, "scale_grad_by_freq", False):
        raise Unsupported("with scale_grad_by_freq=True (its gradient is divided by how often each index occurs)")
    pad = c.arg(2, "padding_idx", -1)   # aten's -1: none (nn.Embedding and F.embedding count a negative from the end)
    return f"embedding({c.args[1]}, {c.args[0]}{'' if pad == -1 else f', padding_idx={pad}'})"


def dropout(c):
    p, train = c.arg(1, "p", 0.5), c.arg(2, "train", True)
    return Alias(c.args[0]) if not train or not p else f"dropout({c.args[0]}, {p!r})"


def cosine(c):
    return f"cosine_similarity({c.args[0]}, {c.args[1]}, axis={c.arg(2, 'dim', 1)}, eps={c.arg(3, 'eps', 1e-8)!r})"


def weight_norm(c):
    """torch's weight_norm reparametrisation: v * g / the norm of v over every axis but dim (over all
    of them for dim -1)."""
    v, g, dim = c.args[0], c.args[1], c.arg(2, "dim", 0)
    ndim = c.ndim()
    others = tuple(a for a in range(ndim) if dim == -1 or a != dim % ndim)
    return f"{v} * ({g} / norm({v}, axis={text(others)}, keepdims=True))"


NN_OPS = {
    "_weight_norm": weight_norm,
    "cross_entropy_loss": cross_entropy, "nll_loss": nll, "nll_loss_nd": nll, "mse_loss": mse, "binary_cross_entropy": bce,
    "binary_cross_entropy_with_logits": bce_logits,
    "l1_loss": lambda c: reduced(f"abs({c.args[0]} - {c.args[1]})", c.arg(2, "reduction", 1)),
    "layer_norm": layer_norm, "batch_norm": batch_norm, "group_norm": group_norm, "embedding": embedding,
    "dropout": dropout, **ATTENTION_OPS,
    **CONV_OPS, "cosine_similarity": cosine,
    "huber_loss": huber, "smooth_l1_loss": smooth_l1, "kl_div": kl_div,
    "log_sigmoid": lambda c: f"-softplus(-{c.args[0]})",
    "mish": lambda c: f"{c.args[0]} * tanh(softplus({c.args[0]}))",
    "hardswish": hardswish,
    "hardsigmoid": lambda c: f"hardtanh({c.args[0]}, lo=-3.0, hi=3.0) / 6 + 0.5",   # no gradient at +-3, as torch's
    "glu": glu, "prelu": prelu,
}
