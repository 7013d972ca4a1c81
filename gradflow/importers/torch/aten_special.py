"""aten's special functions and quantiles -> gradflow expressions: lgamma, digamma and erfinv under
their torch and torch.special names, polygamma of order 0, mvlgamma; quantile and nanquantile.

A quantile is written out as torch computes it: x sorted along dim (gradflow's stable argsort,
NaN last), its rank q (n - 1) in the sorted row, the entries below and above that rank taken and
joined by torch's lerp. So the gradient goes to those two entries with weights 1 - frac and frac,
as torch's does; to the one entry the rank falls on for lower, higher and nearest. Tied entries
are ordered by index, as torch's sort does up to 16 entries; in a longer row torch's sort orders
ties its own way: the values and each tied group's total gradient are torch's, but which of the
tied entries gets it may differ (the README's From PyTorch says so).
"""

from __future__ import annotations

import math

from gradflow.importers.torch.call import Unsupported, index_text, operand, shape_text, unary

INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def mvlgamma(c):
    """torch.mvlgamma(x, p): the sum of lgamma(x - i / 2) over i < p, plus p (p - 1) / 4 log(pi).
    (torch refuses an x at or below (p - 1) / 2; gradflow does not look.)"""
    x, p = c.args[0], c.arg(1, "p")
    terms = [f"lgamma({x})"] + [f"lgamma({x} - {i / 2!r})" for i in range(1, p)]
    constant = p * (p - 1) / 4 * math.log(math.pi)
    return " + ".join(terms + ([repr(constant)] if constant else []))


def polygamma(c):
    """torch.polygamma(n, x): digamma for n = 0; the higher orders are refused."""
    if c.args[0] != 0:
        raise Unsupported(f"of order {c.args[0]} (gradflow has order 0, digamma)")
    return f"digamma({c.args[1]})"


def rows_of(c, d) -> tuple[str, list]:
    """(x with the axis d last, or every entry in one row for d None; the other axes' sizes)."""
    x, shape = c.args[0], list(c.shapes[0])
    if d is None:
        return (x if len(shape) == 1 else f"reshape({x}, [{math.prod(shape)}])"), []
    rest = [k for k in range(len(shape)) if k != d]
    order = rest + [d]
    return (x if d == len(shape) - 1 else f"permute({x}, dims={tuple(order)!r})"), [shape[k] for k in rest]


def lerp(c, below: str, above: str, weight: str) -> str:
    """torch's lerp, from the nearer end: below + w (above - below) for w < 0.5, else above - (above -
    below) (1 - w); so an infinite neighbour gives torch's inf or NaN. Gradients 1 - w and w."""
    below, above, weight = c.line(below, "below"), c.line(above, "above"), c.line(weight, "weight")
    return (f"where(less({weight}, 0.5), {below} + {weight} * ({above} - {below}), "
            f"{above} - ({above} - {below}) * (1.0 - {weight}))")


def ranked(c, s: str, k: int, q, n: int, skip_nan: bool) -> str:
    """Each row's rank of q: q (n - 1), or n - 1 where the row holds a NaN (sorted last), so the
    quantile is NaN, as torch's; skipping NaN, q (m - 1) of the m entries that are not, and 0 for
    a row of NaN only."""
    if skip_nan:
        count = f"sum(equal({s}, {s}), axis={k}, keepdims=True)"
        rank = c.line(f"{operand(q)} * ({count} - 1.0)", "ranks")
        return f"where(less({rank}, 0.0), 0.0, {rank})"
    last = f"{s}{index_text(k + 1, k, '-1:')}"
    rank = repr(q * (n - 1)) if isinstance(q, float) else f"{q} * {float(n - 1)!r}"   # torch's product, in float64
    return f"where(not_equal({last}, {last}), {float(n - 1)!r}, {rank})"


def picked(c, s: str, k: int, rank: str, how: str) -> str:
    """The row's entries at the rank by the interpolation ``how``."""
    def at(index: str) -> str:
        return f"take_along_axis({s}, to_int({index}), axis={k})"
    rounded = {"lower": rank, "higher": f"ceil({rank})", "nearest": f"round({rank})"}   # round: half to even
    if how in rounded:
        return at(rounded[how])
    below, above = at(rank), at(f"ceil({rank})")   # to_int cuts a rank of at least 0 down
    if how == "midpoint":
        below, above = c.line(below, "below"), c.line(above, "above")
        return f"{above} - ({above} - {below}) * 0.5"
    return lerp(c, below, above, f"{rank} - floor({rank})")


def quantile(skip_nan: bool):
    """torch.quantile and torch.nanquantile: q a number or a 0-d or 1-d tensor (then the output
    leads with q's axis), over every entry or along dim, keepdim, any interpolation."""
    def handler(c):
        q, how = c.args[1], c.kwargs.get("interpolation", "linear")
        if how not in INTERPOLATIONS:
            raise Unsupported(f"with interpolation={how!r}")
        dim, lined = c.arg(2, "dim"), c.shapes[1] is not None and len(c.shapes[1]) == 1
        d = None if dim is None or not c.ndim() else dim % c.ndim()
        rows, rest = rows_of(c, d)
        n, k = c.shapes[0][d] if d is not None else math.prod(c.shapes[0]), len(rest)
        if rows != c.args[0]:
            rows = c.line(rows, "rows")
        s = c.line(f"take_along_axis({rows}, argsort({rows}, axis={k}), axis={k})", "sorted")
        rank = c.line(ranked(c, s, k, q, n, skip_nan), "rank")
        out, shape = picked(c, s, k, rank, how), rest + [c.shapes[1][0] if lined else 1]
        if lined and k:   # q's axis first, as torch's
            out = f"permute({c.line(out, 'picked')}, dims={tuple([k] + list(range(k)))!r})"
            shape = shape[-1:] + rest
        return out if list(c.shape) == shape else f"reshape({out}, {shape_text(c.shape)})"
    return handler


SPECIAL_OPS: dict = {
    "lgamma": unary("lgamma"), "special_gammaln": unary("lgamma"),
    "digamma": unary("digamma"), "special_digamma": unary("digamma"), "special_psi": unary("digamma"),
    "erfinv": unary("erfinv"), "special_erfinv": unary("erfinv"),
    "polygamma": polygamma, "special_polygamma": polygamma,
    "mvlgamma": mvlgamma, "special_multigammaln": mvlgamma,
    "quantile": quantile(False), "nanquantile": quantile(True),
}
