"""aten's losses, distances and norms beyond those of aten_nn -> gradflow expressions: vector
p-norms, pairwise distances and the triplet loss, written so that their gradients are torch's at
zeros, ties and kinks."""

from __future__ import annotations

import math
import re

from gradflow.importers.torch.aten_nn import reduced
from gradflow.importers.torch.call import operand, reduced_over


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
        at_zero = "0.0" if p > 0 else operand(math.inf)
        powers = f"where(equal({x}, 0), {at_zero}, abs(where(equal({x}, 0), 1.0, {x})) ** {p!r})"
        return f"{reduced_over('sum', powers, axis, keep)} ** {1 / p!r}"
    # the root's gradient is inf at a zero sum: that sum reads 1 instead and is then replaced
    total = c.line(reduced_over("sum", f"abs({x}) ** {p!r}", axis, keep), suffix + "_sum")
    return f"where(equal({total}, 0), 0.0, where(equal({total}, 0), 1.0, {total}) ** {1 / p!r})"


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


LOSS_OPS: dict = {"pairwise_distance": pairwise_distance, "dist": dist, "triplet_margin_loss": triplet_margin}
