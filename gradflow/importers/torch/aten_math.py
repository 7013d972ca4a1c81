"""aten's mathematics beyond gradflow's own ops: expm1, sinh, cosh, atanh, logaddexp, xlogy, exp2,
log2, log10, nan_to_num, nanmean, selu and celu, each written so that its value and gradient are
torch's where precision is at stake (near 0, far below it, at infinities, NaN); and the calls that
map onto one op of gradflow's with their arguments sorted out: prod, remainder and fmod, the rounding
divisions, bucketize and searchsorted, and the vector and matrix norms of torch.norm and
torch.linalg."""

from __future__ import annotations

from gradflow.importers.torch.aten_losses import vector_norm
from gradflow.importers.torch.aten_nn import xlogy
from gradflow.importers.torch.aten_shape import converted
from gradflow.importers.torch.aten_spectral import spectral_norm
from gradflow.importers.torch.call import Alias, Unsupported, axes, operand, reduced_over, text

LN2 = 0.6931471805599453


def expm1_of(x: str) -> str:
    """e ** x - 1 whose gradient is e ** x to the last digits: near 0 (|x| <= 1) as tanh(x / 2)
    (e ** x + 1), which does not cancel, reading x clipped to [-1, 1] so that a large x gives
    that branch no inf * 0 in its gradient; elsewhere e ** x - 1."""
    u = f"clip({x}, -1.0, 1.0)"
    return f"where(less_equal(abs({x}), 1.0), tanh({u} * 0.5) * (exp({u}) + 1), exp({x}) - 1)"


def expm1(c):
    """e ** x - 1, with e ** x as its gradient: torch's, its result + 1, loses e ** x against 1
    far below 0 (a relative error of 1e-3 at -30, exactly 0 below about -37.4)."""
    x = c.args[0]
    return f"where(greater({x}, 0), {expm1_of(x)}, elu({x}))"


SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805


def celu(c):
    """x above 0, else alpha (e ** (x / alpha) - 1): elu of x / alpha, times alpha."""
    x, alpha = c.args[0], c.arg(1, "alpha", 1.0)
    return f"elu({x})" if alpha == 1 else f"elu({x} * {1 / alpha!r}) * {alpha!r}"


def halves(x: str, sign: str) -> str:
    """e ** x / 2 +- e ** -x / 2, each half taken in the exponent: sinh(710) is finite, as torch's."""
    return f"exp({x} - {LN2!r}) {sign} exp(-{x} - {LN2!r})"


def sinh_near(c, u: str) -> str:
    """sinh(u) = tanh(u / 2) (1 + cosh(u)) for small u: no cancellation in it or its gradient.
    It reads u three times: once, on a line of its own."""
    u = c.line(u, "near")
    return f"tanh({u} * 0.5) * (1 + {halves(u, '+')})"


def sinh(c):
    x = c.args[0]
    return f"where(less_equal(abs({x}), 1.0), {sinh_near(c, f'clip({x}, -1.0, 1.0)')}, {halves(x, '-')})"


def cosh(c):
    """1 + 2 sinh(x / 2) ** 2 near 0, whose gradient, sinh(x), keeps its precision there."""
    x = c.args[0]
    near = f"1 + 2 * square({sinh_near(c, f'clip({x}, -1.0, 1.0) * 0.5')})"
    return f"where(less_equal(abs({x}), 1.0), {near}, {halves(x, '+')})"


def logaddexp(c):
    """max(a, b) + log(1 + e ** -|a - b|), |a - b| read as 0 on a tie so that two equal infinities
    give that infinity, as torch; a tie passes half the gradient to each side, as torch's, but an
    infinite one too, where torch's is NaN."""
    a, b = text(c.args[0]), text(c.args[1])
    return f"maximum({a}, {b}) + softplus(-abs(where(equal({a}, {b}), 0.0, {a} - {b})))"


def atanh(c):
    """(log1p(x) - log1p(-x)) / 2: precise near 0, +-inf at +-1 and NaN beyond, as torch's; its
    gradient, 1 / (1 + x) / 2 + 1 / (1 - x) / 2, is torch's 1 / (1 - x ** 2), beyond +-1 too."""
    return f"(log1p({c.args[0]}) - log1p(-{c.args[0]})) * 0.5"


def nanmean(c):
    """The mean of the entries that are not NaN (an all-NaN slice: 0 / 0, NaN, as torch). As
    torch's nansum, a NaN entry is replaced by 0 through nan_to_num, whose gradient is a multiply:
    0 into it, NaN in an all-NaN slice, as torch's."""
    x, axis, keep = c.args[0], axes(c.arg(1, "dim"), c.ndim()), c.arg(2, "keepdim", False)
    kept = f"where(not_equal({x}, {x}), nan_to_num({x}), {x})"
    return f"{reduced_over('sum', kept, axis, keep)} / {reduced_over('sum', f'equal({x}, {x})', axis, keep)}"


def exp2(c):
    return f"2.0 ** {c.args[0]}"


def x_log_y(c):
    return xlogy(operand(c.args[0]), operand(c.args[1]))


def nan_to_num(c):
    """gradflow's own nan_to_num, whose default replacements for inf and -inf are the run's dtype's
    largest finite numbers, as torch's are its tensor's (float64's would overflow a float32 run).
    An infinite replacement, which an attribute cannot hold, is put in by a where."""
    x, given, infinite = text(c.args[0]), {}, []
    picks = {"nan": f"not_equal({x}, {x})", "posinf": f"equal({x}, {operand(float('inf'))})",
             "neginf": f"equal({x}, {operand(float('-inf'))})"}
    for k, name in enumerate(picks, start=1):
        value = c.arg(k, name)
        if isinstance(value, float) and value in (float("inf"), float("-inf")):
            infinite.append((picks[name], value))
            value = 0.0
        if value is not None:
            given[name] = value
    out = f"nan_to_num({', '.join([x] + [f'{k}={text(v)}' for k, v in given.items()])})"
    for picked, value in infinite:
        out = f"where({picked}, {operand(value)}, {out})"
    return out


def prod(c):
    """torch.prod of every entry or along one dim, in the output's kind (dtype=, or a bool's
    product as an integer)."""
    x = converted(c.args[0], c.kinds.get(0), c.kind)
    if c.overload == "default":
        return f"prod({x})"
    if not c.ndim():   # a 0-d tensor's product along its one dim is itself
        return Alias(x) if x == c.args[0] else x
    return reduced_over("prod", x, str(c.args[1] % c.ndim()), c.arg(2, "keepdim", False))


def of_two(op):
    """op(a, b) of tensors or numbers, an infinite number kept infinite; a whole number beside an
    integer tensor keeps it an integer where op does (remainder, floor_divide), as in torch."""
    return lambda c: f"{op}({operand(c.args[0])}, {operand(c.args[1])})"


def modulo(op):
    """remainder (%) and fmod of a tensor by a tensor or a number, and remainder of a number by an
    integer tensor."""
    def handler(c):
        if c.overload == "Scalar_Tensor" and c.kinds.get(1) != "int":
            raise Unsupported("of a number by a float tensor (torch has no gradient for it)")
        return of_two(op)(c)
    return handler


def div(c):
    """a / b, or torch's rounding divisions, by a tensor or a number: rounding_mode "floor" (as
    a // b and floor_divide) and "trunc" are gradflow's floor_divide and trunc_divide, torch's
    values exactly where floor(a / b) is not (1.0 // 0.1 is 9.0), and cuts, as torch's gradient
    of them is 0."""
    mode = c.kwargs.get("rounding_mode")
    if mode is None:
        return f"{text(c.args[0])} / {text(c.args[1])}"
    return of_two(f"{mode}_divide")(c)


def atan2(c):
    return f"atan2({c.args[0]}, {c.args[1]})"


def searched(boundaries: str, x, right) -> str:
    """Where x goes among boundaries; out_int32 changes nothing in gradflow's integers."""
    return f"searchsorted({boundaries}, {operand(x)}{', right=True' if right else ''})"


def bucketize(c):
    return searched(c.args[1], c.args[0], c.kwargs.get("right", False))


def searchsorted(c):
    """torch.searchsorted(sorted_sequence, values, right= or side=, sorter=): with a sorter, the
    boundaries taken in its order."""
    boundaries, sorter = c.args[0], c.kwargs.get("sorter")
    if sorter is not None:
        boundaries = f"take_along_axis({boundaries}, {sorter}, axis=-1)"
    return searched(boundaries, c.args[1], c.kwargs.get("right") or c.kwargs.get("side") == "right")


def norm(c):
    """torch.linalg.vector_norm and torch.norm of any order (vector_norm says how at each)."""
    return vector_norm(c, c.args[0], c.arg(1, "ord", 2), axes(c.arg(2, "dim"), c.ndim()), c.arg(3, "keepdim", False))


def matrix_norm_of(c, order, dims, keep) -> str:
    """A matrix norm over two axes: the Frobenius norm, the 2-norm of the entries; the nuclear and
    spectral norms, of the singular values (aten_spectral). The others are refused, saying why."""
    if order == "fro":
        return vector_norm(c, c.args[0], 2, axes(dims, c.ndim()), keep)
    if order == "nuc" or order in (2, -2):
        return spectral_norm(c, order, dims, keep)
    raise Unsupported(f"with ord={order!r} over two axes (a matrix norm): of the matrix norms gradflow has the "
                      "Frobenius (ord='fro'), nuclear ('nuc') and spectral (2, -2) ones")


def linalg_norm(c):
    """torch.linalg.norm: a vector norm over one axis or, without an order, over every entry (or
    the dims given); with an order, over two axes (or of a matrix), matrix_norm's."""
    order, dims, keep = c.arg(1, "ord"), c.arg(2, "dim"), c.arg(3, "keepdim", False)
    dims = [dims] if isinstance(dims, int) else dims
    if order is not None and len(dims or range(c.ndim())) == 2:
        return matrix_norm_of(c, order, dims or [0, 1], keep)
    if isinstance(order, str):
        raise Unsupported(f"with ord={order!r} over {len(dims or range(c.ndim()))} axes (a matrix norm needs two)")
    return vector_norm(c, c.args[0], 2 if order is None else order, axes(dims, c.ndim()), keep)


def matrix_norm(c):
    """torch.linalg.matrix_norm, over the last two axes by default."""
    return matrix_norm_of(c, c.arg(1, "ord", "fro"), c.arg(2, "dim", [-2, -1]), c.arg(3, "keepdim", False))


def nuclear_norm(c):
    """torch.nuclear_norm(A, keepdim=False) of a matrix, or over two dims (A, dim, keepdim=False)."""
    if c.overload == "dim":
        return matrix_norm_of(c, "nuc", c.args[1], c.arg(2, "keepdim", False))
    return matrix_norm_of(c, "nuc", [-2, -1], c.arg(1, "keepdim", False))


MATH_OPS = {
    "selu": lambda c: f"elu({c.args[0]}, alpha={SELU_ALPHA!r}) * {SELU_SCALE!r}",
    "celu": celu,
    "expm1": expm1, "sinh": sinh, "cosh": cosh, "atanh": atanh, "arctanh": atanh, "logaddexp": logaddexp,
    "nan_to_num": nan_to_num, "nanmean": nanmean,
    "log2": lambda c: f"log({c.args[0]}) * 1.4426950408889634",   # 1 / ln 2
    "log10": lambda c: f"log({c.args[0]}) * 0.4342944819032518",  # 1 / ln 10
    "exp2": exp2, "xlogy": x_log_y,
    "special_expm1": expm1, "special_exp2": exp2, "special_xlogy": x_log_y,   # torch.special's names
    "prod": prod, "remainder": modulo("remainder"), "fmod": modulo("fmod"),
    "div": div, "floor_divide": of_two("floor_divide"),
    "atan2": atan2, "arctan2": atan2,
    "bucketize": bucketize, "searchsorted": searchsorted,
    "linalg_vector_norm": norm, "linalg_norm": linalg_norm, "linalg_matrix_norm": matrix_norm,
    "nuclear_norm": nuclear_norm,
}
