"""aten's losses, distances and norms beyond those of aten_nn -> gradflow expressions: vector
p-norms, pairwise distances, the margin and embedding losses, Poisson's negative log-likelihood
and RMS normalisation, each written so that its gradient is torch's at zeros, ties and kinks."""

from __future__ import annotations

import math
import re

from gradflow.importers.torch.aten_nn import reduced
from gradflow.importers.torch.call import operand, reduced_over, shape_text

FLOAT32_EPS = 1.1920928955078125e-07   # torch.finfo(torch.float32).eps


def named(c, x: str, suffix: str) -> str:
    """x as a name that may be read several times: itself if it is one, else a line of its own."""
    return x if re.fullmatch(r"[\w.]+", x) else c.line(x, suffix)


def vector_norm(c, x: str, p, axis, keep, suffix: str = "norm") -> str:
    """torch's vector p-norm of x over an axis text (None: every axis), with the gradient of torch's
    norm_backward: sign(x) for p=1 (0 at 0); for +-inf, sign(x) shared by the entries at the
    largest (smallest) |x|, as amax's ties; none for p=0, a count of non-zeros (an implicit cut, as
    sign; torch's gradient is undefined); for other p, sign(x) |x| ** (p - 1) / norm ** (p - 1),
    0 at a zero norm and, for p < 1, at a zero entry. Negative p: a zero entry makes the norm 0."""
    if p == 2:
        return reduced_over("norm", x, axis, keep)
    if p == 1:
        return reduced_over("sum", f"abs({x})", axis, keep)
    if p in (math.inf, -math.inf):
        return reduced_over("max" if p > 0 else "min", f"abs({x})", axis, keep, "split")
    if p == 0:
        return reduced_over("sum", f"not_equal({x}, 0)", axis, keep)
    if p < 1:   # |x| ** (p - 1) is inf at 0: that entry reads 1 instead and is then replaced
        x = named(c, x, suffix + "_of")
        zero, at_zero = c.line(f"equal({x}, 0)", suffix + "_zero"), "0.0" if p > 0 else operand(math.inf)
        powers = f"where({zero}, {at_zero}, abs(where({zero}, 1.0, {x})) ** {p!r})"
        return f"{reduced_over('sum', powers, axis, keep)} ** {1 / p!r}"
    # the root's gradient is inf at a zero sum: that sum reads 1 instead and is then replaced
    total = c.line(reduced_over("sum", f"abs({x}) ** {p!r}", axis, keep), suffix + "_sum")
    zero = c.line(f"equal({total}, 0)", suffix + "_zero")
    return f"where({zero}, 0.0, where({zero}, 1.0, {total}) ** {1 / p!r})"


def distance(c, x1: str, x2: str, p, eps, keep: bool, suffix: str) -> str:
    """torch's pairwise_distance: the p-norm of x1 - x2 + eps over the last axis."""
    return vector_norm(c, f"{x1} - {x2} + {eps!r}", p, -1, keep, suffix)


def pairwise_distance(c):
    return distance(c, c.args[0], c.args[1], c.arg(2, "p", 2.0), c.arg(3, "eps", 1e-6), bool(c.arg(4, "keepdim")),
                    "distance")


def dist(c):
    """torch.dist: the p-norm of a - b over every entry."""
    return vector_norm(c, f"{c.args[0]} - {c.args[1]}", c.arg(2, "p", 2), None, False)


def triplet_margin(c):
    """max(margin + d(a, p) - d(a, n), 0), d torch's pairwise distance; with swap, d(a, n) is the
    smaller of it and d(p, n) (a tie shares the gradient, as torch's min). At 0 the gradient
    passes, as torch's clamp_min."""
    a, pos, neg = c.args[:3]
    margin, p, eps = c.arg(3, "margin", 1.0), c.arg(4, "p", 2.0), c.arg(5, "eps", 1e-6)
    near = distance(c, a, pos, p, eps, False, "positive")
    far = distance(c, a, neg, p, eps, False, "negative")
    if c.arg(6, "swap", False):
        far = f"minimum({far}, {distance(c, pos, neg, p, eps, False, 'swap')})"
    return reduced(f"clip({margin!r} + ({near}) - ({far}), 0.0, None)", c.arg(7, "reduction", 1))


def margin_ranking(c):
    x1, x2, y, margin = c.args[0], c.args[1], c.args[2], c.arg(3, "margin", 0.0)
    return reduced(f"clip(-{y} * ({x1} - {x2}) + {margin!r}, 0.0, None)", c.arg(4, "reduction", 1))


def cosine_embedding(c):
    """1 - cos where the target is 1, max(cos - margin, 0) where it is -1, 0 elsewhere; cos as
    torch writes it, x1.x2 / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12)) over the target's next axis."""
    x1, x2, y, margin = c.args[0], c.args[1], c.args[2], c.arg(3, "margin", 0.0)
    k = c.ndim(2)
    lengths = " * ".join(f"(sum(square({x}), axis={k}) + 1e-12)" for x in (x1, x2))
    cos = c.line(f"sum({x1} * {x2}, axis={k}) / sqrt({lengths})", "cos")
    per = (f"where(equal({y}, 1), 1 - {cos}, 0.0)"
           f" + where(equal({y}, -1), clip({cos} - {margin!r}, 0.0, None), 0.0)")
    return reduced(per, c.arg(4, "reduction", 1))


def hinge_embedding(c):
    """max(margin - x, 0) where the target is not 1, plus x where it is not -1."""
    x, y, margin = c.args[0], c.args[1], c.arg(2, "margin", 1.0)
    per = f"where(not_equal({y}, 1), clip({margin!r} - {x}, 0.0, None), 0.0) + where(not_equal({y}, -1), {x}, 0.0)"
    return reduced(per, c.arg(3, "reduction", 1))


def soft_margin(c):
    """log(1 + e ** (-y x)), as softplus: torch's overflows to inf, with a NaN gradient, where
    -y x > 709; gradflow's is finite there (-y x, gradient -y)."""
    return reduced(f"softplus(-{c.args[1]} * {c.args[0]})", c.arg(2, "reduction", 1))


def multi_margin(c):
    """For each row, weight[y] max(0, margin - x[y] + x[i]) ** p summed over the classes i other
    than y, over the number of classes, as torch's kernel (the weight outside the power). At
    margin - x[y] + x[i] == 0 no gradient passes, as torch's."""
    x, y, p, margin, weight = c.args[0], c.args[1], c.arg(2, "p", 1), c.arg(3, "margin", 1), c.arg(4, "weight")
    classes = c.shapes[0][-1]
    if c.ndim() == 1:   # one row, read two or three times below
        x, y = c.line(f"reshape({x}, [1, {classes}])", "row"), c.line(f"reshape({y}, [1])", "label")
    gap = f"relu({margin!r} - take_along_axis({x}, expand_dims({y}, 1), axis=1) + {x})"
    per = f"where(one_hot({y}, {classes}), 0.0, {gap if p == 1 else f'square({gap})'})"
    if weight is not None:
        per = f"{per} * expand_dims(take({weight}, {y}, axis=0), 1)"
    per = f"sum({per}, axis=1) / {classes}"
    if c.ndim() == 1:
        per = f"reshape({per}, {shape_text(c.shape)})"
    return reduced(per, c.arg(5, "reduction", 1))


def poisson_nll(c):
    """e ** x - t x for a log input, else x - t log(x + eps); full adds Stirling's t log t - t +
    log(2 pi t) / 2 where t > 1, written out where it is not used, so that a target that takes
    gradient gets torch's (NaN at t == 0, 0 elsewhere at or below 1)."""
    x, t = c.args[0], c.args[1]
    log_input, full, eps = c.arg(2, "log_input", True), c.arg(3, "full", False), c.arg(4, "eps", 1e-8)
    per = f"exp({x}) - {t} * {x}" if log_input else f"{x} - {t} * log({x} + {eps!r})"
    if full:
        per = f"{per} + where(less_equal({t}, 1), 0.0, {t} * log({t}) - {t} + 0.5 * log({2 * math.pi!r} * {t}))"
    return reduced(per, c.arg(5, "reduction", 1))


def rms_norm(c):
    """x / sqrt(mean(x ** 2) + eps) over the normalized axes, times weight, as torch's.

    eps=None: torch takes the epsilon of its input's compute type, float32's (1.19e-7) for float32,
    float16 and bfloat16 models, float64's (2.2e-16) for float64 ones. The import runs in float64,
    but what it describes is the model as the user trains it, almost always in float32 or lower:
    gradflow takes float32's, so an all-zero row (padding) gets the float32 model's gradient,
    weight / sqrt(1.19e-7) ~ 2896 weight, not 6.7e7 weight (a false exploding gradient). A
    float64 model with eps=None differs by ~1e-7 relative: give it eps to match exactly."""
    x, shape, weight, eps = c.args[0], c.args[1], c.arg(2, "weight"), c.arg(3, "eps")
    axis = tuple(range(c.ndim() - len(shape), c.ndim()))
    eps = FLOAT32_EPS if eps is None else eps
    expr = f"{x} / sqrt(mean(square({x}), axis={axis}, keepdims=True) + {eps!r})"
    return expr if weight is None else f"{expr} * {weight}"


LOSS_OPS: dict = {
    "pairwise_distance": pairwise_distance, "dist": dist, "triplet_margin_loss": triplet_margin,
    "margin_ranking_loss": margin_ranking, "cosine_embedding_loss": cosine_embedding,
    "hinge_embedding_loss": hinge_embedding, "soft_margin_loss": soft_margin, "multi_margin_loss": multi_margin,
    "poisson_nll_loss": poisson_nll, "rms_norm": rms_norm,
}
