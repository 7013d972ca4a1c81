"""aten ops -> gradflow expressions: one small handler per op, keyed by the op's name.

This module holds arithmetic, elementwise ops and reductions, and assembles the
whole table ``OPS`` from its shape and neural-network parts.
"""

from __future__ import annotations

from gradflow.importers.torch.aten_fold import FOLD_OPS
from gradflow.importers.torch.aten_grid import GRID_OPS
from gradflow.importers.torch.aten_image import IMAGE_OPS
from gradflow.importers.torch.aten_linalg import LINALG_OPS
from gradflow.importers.torch.aten_spectral import SPECTRAL_OPS
from gradflow.importers.torch.aten_losses import LOSS_OPS
from gradflow.importers.torch.aten_math import MATH_OPS
from gradflow.importers.torch.aten_nn import NN_OPS, linear_of
from gradflow.importers.torch.aten_rnn import RNN_OPS
from gradflow.importers.torch.aten_scan import SCAN_OPS
from gradflow.importers.torch.aten_shape import SHAPE_OPS
from gradflow.importers.torch.aten_special import SPECIAL_OPS
from gradflow.importers.torch.call import (
    Call, Parts, Unsupported, axes, operand, reduced_over, shape_text, text, unary,
)


def reduce(op: str, c: Call, dims_at: int = 1, keep_at: int = 2, ties: str | None = None) -> str:
    return reduced_over(op, c.args[0], axes(c.arg(dims_at, "dim"), c.ndim()), c.arg(keep_at, "keepdim", False),
                        ties)


def binary(symbol):
    def handler(c):
        a, b = text(c.args[0]), text(c.args[1])
        alpha = c.kwargs.get("alpha", c.args[2] if len(c.args) > 2 else 1)
        if symbol == "r-":   # rsub(a, b, alpha) is b - alpha * a
            return f"{b} - {a}" if alpha == 1 else f"{b} - {text(alpha)} * {a}"
        if alpha != 1 and symbol in "+-":
            b = f"{text(alpha)} * {b}"
        return f"{a} {symbol} {b}"
    return handler


def compare(op):
    return lambda c: f"{op}({text(c.args[0])}, {text(c.args[1])})"


def linear(c):
    return linear_of(c.args[0], c.args[1], c.arg(2, "bias"))


def addmm(c):
    """addmm and baddbmm (nn.MultiheadAttention's scores beside a mask): beta input + alpha a @ b."""
    beta, alpha = c.kwargs.get("beta", 1), c.kwargs.get("alpha", 1)
    product = f"{c.args[1]} @ {c.args[2]}" if alpha == 1 else f"({c.args[1]} @ {c.args[2]}) * {text(alpha)}"
    if beta == 0:   # torch ignores the input then, NaN and inf included
        return product
    return f"{c.args[0]} + {product}" if beta == 1 else f"{c.args[0]} * {text(beta)} + {product}"


def clip(c):
    lo, hi = c.arg(1, "min"), c.arg(2, "max")
    if c.overload == "Tensor":   # as torch's clamp_backward: x keeps the gradient at a bound it equals
        x, lo, hi = c.args[0], operand(lo) if lo is not None else None, operand(hi) if hi is not None else None
        expr = x if lo is None else f"where(less({x}, {lo}), {lo}, {x})"
        return expr if hi is None else f"where(greater({expr}, {hi}), {hi}, {expr})"
    return clipped(c, lo, hi)


def clipped(c, lo, hi) -> str:
    """clip, or on an integer tensor with integer bounds maximum and minimum, which keep it an
    integer (an index, such as position ids clamped at 0), as torch's clamp does."""
    x = c.args[0]
    if c.kind != "int" or not all(b is None or b.__class__ is int for b in (lo, hi)):
        return f"clip({x}, {text(lo)}, {text(hi)})"
    x = x if lo is None else f"maximum({x}, {lo})"
    return x if hi is None else f"minimum({x}, {hi})"


def spread(c):
    """(dims, keepdim, n, correction) of var/std in each aten form: (x, unbiased),
    (x, dim, unbiased, keepdim), (x, dim, *, correction, keepdim)."""
    if c.overload == "default":
        dims, unbiased, keep, correction = None, c.arg(1, "unbiased", True), False, None
    elif c.overload == "dim":
        dims, unbiased, keep, correction = c.arg(1, "dim"), c.arg(2, "unbiased", True), c.arg(3, "keepdim", False), None
    elif c.overload == "correction":
        dims, unbiased, keep, correction = c.arg(1, "dim"), True, c.kwargs.get("keepdim", False), \
            c.kwargs.get("correction")
    else:
        raise Unsupported(f"in its {c.overload!r} form")
    if correction is None:
        correction = 1 if unbiased else 0
    dims = [dims] if isinstance(dims, int) else dims
    shape = c.shapes[0]
    n = 1
    for d in (range(len(shape)) if not dims else {d % len(shape) for d in dims}):
        n *= shape[d]
    if n - correction <= 0:
        raise Unsupported(f"over {n} value(s) with correction={correction!r} (torch gives inf or nan)")
    return dims, bool(keep), n, correction


def variance(c):
    dims, keep, n, correction = spread(c)
    expr = f"var({c.args[0]}, axis={axes(dims, c.ndim())}, keepdims={keep})"
    return expr if not correction else f"{expr} * {n / (n - correction)!r}"


def deviation(c):
    """std as the norm of x - mean over sqrt(n - correction): the norm's gradient is 0 where all the
    values are equal, as torch's std_backward gives, where sqrt(var) gives 0 * inf = NaN."""
    dims, keep, n, correction = spread(c)
    axis, x = axes(dims, c.ndim()), c.args[0]
    return f"norm({x} - mean({x}, axis={axis}, keepdims=True), axis={axis}, keepdims={keep}) / {(n - correction) ** 0.5!r}"


def softmax(op):
    return lambda c: f"{op}({c.args[0]}, axis={c.args[1]})"


def gelu(c):
    if c.kwargs.get("approximate", "none") == "tanh":
        return f"gelu({c.args[0]})"
    return f"gelu({c.args[0]}, approximate='none')"


def softplus(c):
    beta, threshold = c.arg(1, "beta", 1), c.arg(2, "threshold", 20)
    if threshold < 20:   # from 20 on, torch's linear tail differs from the exact curve by under e ** -20
        raise Unsupported(f"with threshold={threshold!r} (torch gives x itself above it; gradflow's "
                          "softplus follows the curve everywhere)")
    if beta == 1:
        return f"softplus({c.args[0]})"
    return f"softplus({c.args[0]} * {text(beta)}) / {text(beta)}"


def max_dim(op, arg, elementwise):
    def handler(c):
        if c.overload == "other":   # torch.max(a, b): elementwise, as torch.maximum
            return compare(elementwise)(c)
        if c.overload == "default":
            return reduced_over(op, c.args[0], None, False, "split")
        if c.overload != "dim":
            raise Unsupported(f"in its {c.overload!r} form")
        keep = c.arg(2, "keepdim", False)
        return Parts([f"{f}({c.args[0]}, axis={c.args[1]}, keepdims={keep})" for f in (op, arg)])
    return handler


def isnan(c):
    return f"not_equal({c.args[0]}, {c.args[0]})"   # NaN alone differs from itself


def logical_not(c):
    return f"equal({c.args[0]}, 0)"


def bitwise_not(c):
    if c.kinds.get(0) != "bool":   # ~x of an integer is -x - 1
        raise Unsupported("of an integer tensor (gradflow maps ~ of a boolean tensor)")
    return logical_not(c)


def logical(op):
    """and / or / xor of masks: gradflow holds booleans as 0/1 floats."""
    def handler(c):
        if c.overload not in ("default", "Tensor") or {c.kinds.get(0), c.kinds.get(1)} != {"bool"}:
            raise Unsupported("beyond two boolean tensors")
        return op.format(a=c.args[0], b=c.args[1])
    return handler


def einsum(c):
    """Operands in torch's order, two at a time: each pair lined up on the letters still wanted (by
    the output or a later operand) then the summed ones, multiplied with broadcasting, summed over
    the rest; so no product holds more letters than one pair's."""
    equation, operands, shapes = c.args[0].replace(" ", ""), c.args[1], c.shapes[1]
    inputs, arrow, out = equation.partition("->")
    terms = inputs.split(",")
    spare = [ch for ch in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if ch not in equation]
    dots = max([len(shape) - len(term) + 3 for term, shape in zip(terms, shapes) if "..." in term] or [0])
    batch = "".join(spare[:dots])
    terms = [t.replace("...", batch[dots - (len(s) - len(t) + 3):]) for t, s in zip(terms, shapes)]
    if not arrow:
        letters = "".join(terms)
        out = batch + "".join(sorted(ch for ch in set(letters) - set(batch) if letters.count(ch) == 1))
    out = out.replace("...", batch)
    for term, shape in zip(terms, shapes):
        if len(term) != len(shape) or not term.isalpha():
            raise Unsupported(f"with {equation!r} for operands of {len(shape)} axes")
        if len(set(term)) != len(term):
            raise Unsupported(f"with a letter repeated in one operand of {equation!r} (a diagonal)")
    if len(set(out)) != len(out) or not set(out) <= set("".join(terms)):
        raise Unsupported(f"with the output {out!r} of {equation!r}")
    expr, term = operands[0], terms[0]
    for i in range(1, len(terms)):
        wanted = set(out + "".join(terms[i + 1:]))
        kept = out if i == len(terms) - 1 else "".join(dict.fromkeys(ch for ch in term + terms[i] if ch in wanted))
        expr, term = contract([expr, operands[i]], [term, terms[i]], kept), kept
    return expr if len(terms) > 1 else contract([expr], [term], out)


def contract(operands: list, terms: list, out: str) -> str:
    """sum over the letters not in out of the operands' product, each operand's axes lined up on
    out's letters then the summed ones."""
    order = out + "".join(dict.fromkeys(ch for ch in "".join(terms) if ch not in out))
    aligned = []
    for name, term in zip(operands, terms):
        present = sorted(term, key=order.index)
        expr = name
        if present != list(term):
            expr = f"transpose({expr}, axes={tuple(term.index(ch) for ch in present)!r})"
        missing = tuple(i for i, ch in enumerate(order) if ch not in term)
        if missing:
            expr = f"expand_dims({expr}, {missing[0] if len(missing) == 1 else missing!r})"
        aligned.append(expr)
    expr = " * ".join(aligned)
    summed = tuple(range(len(out), len(order)))
    if summed:
        expr = f"sum({expr}, axis={summed[0] if len(summed) == 1 else summed!r})"
    return expr


def var_mean(c, measure=variance):
    """(var or std, mean) over the same axes, as torch.var_mean and torch.std_mean."""
    dims, keep, _, _ = spread(c)
    return measure(c), reduced_over("mean", c.args[0], axes(dims, c.ndim()), keep)


def masked_fill(c):
    return f"where({c.args[1]}, {operand(c.args[2])}, {c.args[0]})"


def rounding(c):
    if c.overload != "default":
        raise Unsupported("with decimals")
    return f"round({c.args[0]})"


def bernoulli(c):
    """torch.bernoulli(p); torch.bernoulli(x, p) and x.bernoulli_(p), a number or a tensor: x's
    shape, each entry 1 with probability p (x's values are not read)."""
    if c.overload == "default":
        return f"bernoulli({c.args[0]})"
    return f"bernoulli(broadcast_to({operand(c.arg(1, 'p', 0.5))}, {shape_text(c.shape)}))"


def normal(c):
    """torch.normal(mean, std) with either a number; the draw of a distribution's sample()."""
    if c.overload not in ("Tensor_Tensor", "Tensor_float", "float_Tensor"):
        raise Unsupported(f"as {c.overload}")
    return f"normal({operand(c.arg(0, 'mean', 0.0))}, {operand(c.arg(1, 'std', 1.0))})"


OPS = {
    **{op: unary(op) for op in ("relu", "sigmoid", "tanh", "exp", "log", "sqrt", "abs", "neg", "sin",
                                "cos", "log1p", "sign", "floor", "ceil", "trunc", "square", "acos", "asin", "atan")},
    "arccos": unary("acos"), "arcsin": unary("asin"), "arctan": unary("atan"), "sgn": unary("sign"),
    "fix": unary("trunc"),
    "round": rounding,
    "silu": unary("silu"),
    "rsqrt": lambda c: f"1 / sqrt({c.args[0]})",
    "reciprocal": lambda c: f"1 / {c.args[0]}",
    "gelu": gelu, "softplus": softplus,
    "leaky_relu": lambda c: f"leaky_relu({c.args[0]}, slope={c.arg(1, 'negative_slope', 0.01)!r})",
    "elu": lambda c: f"elu({c.args[0]}, alpha={c.arg(1, 'alpha', 1.0)!r})",
    "hardtanh": lambda c: f"hardtanh({c.args[0]}, lo={c.arg(1, 'min_val', -1.0)!r}, hi={c.arg(2, 'max_val', 1.0)!r})",
    "relu6": lambda c: f"hardtanh({c.args[0]}, lo=0.0, hi=6.0)",
    "clamp": clip, "clip": clip,
    "clamp_min": lambda c: clipped(c, c.args[1], None),
    "clamp_max": lambda c: clipped(c, None, c.args[1]),
    "add": binary("+"), "sub": binary("-"), "rsub": binary("r-"), "mul": binary("*"),
    "pow": binary("**"), "maximum": compare("maximum"), "minimum": compare("minimum"),
    "lerp": lambda c: f"{c.args[0]} + {text(c.args[2])} * ({c.args[1]} - {c.args[0]})",   # torch's gradients too
    "gt": compare("greater"), "lt": compare("less"), "ge": compare("greater_equal"),
    "le": compare("less_equal"), "eq": compare("equal"), "ne": compare("not_equal"),
    "where": lambda c: f"where({text(c.args[0])}, {operand(c.args[1])}, {operand(c.args[2])})",
    "masked_fill": masked_fill, "isnan": isnan, "logical_not": logical_not, "bitwise_not": bitwise_not,
    "einsum": einsum,
    **{op: logical("{a} * {b}") for op in ("logical_and", "bitwise_and", "__and__")},
    **{op: logical("maximum({a}, {b})") for op in ("logical_or", "bitwise_or", "__or__")},
    **{op: logical("not_equal({a}, {b})") for op in ("logical_xor", "bitwise_xor", "__xor__")},
    "var_mean": lambda c: Parts(list(var_mean(c))),
    "std_mean": lambda c: Parts(list(var_mean(c, deviation))),
    "matmul": binary("@"), "mm": binary("@"), "bmm": binary("@"), "mv": binary("@"),
    "addmm": addmm, "baddbmm": addmm,
    "linear": linear,
    **{op: lambda c: f"sum({c.args[0]} * {c.args[1]})" for op in ("dot", "vdot")},   # real tensors: the same
    "detach": lambda c: f"stop_gradient({c.args[0]})",
    "sum": lambda c: reduce("sum", c), "mean": lambda c: reduce("mean", c),
    "amax": lambda c: reduce("max", c, ties="split"), "amin": lambda c: reduce("min", c, ties="split"),
    "max": max_dim("max", "argmax", "maximum"), "min": max_dim("min", "argmin", "minimum"),
    "argmax": lambda c: reduce("argmax", c), "argmin": lambda c: reduce("argmin", c),
    "logsumexp": lambda c: reduce("logsumexp", c), "var": variance,
    "std": deviation,
    "softmax": softmax("softmax"), "_softmax": softmax("softmax"),
    "log_softmax": softmax("log_softmax"), "_log_softmax": softmax("log_softmax"),
    "one_hot": lambda c: f"one_hot({c.args[0]}, {c.args[1]})",
    "bernoulli": bernoulli, "normal": normal,
    "multinomial": lambda c: f"multinomial({c.args[0]}, {c.args[1]}, replacement={bool(c.arg(2, 'replacement'))})",
    **MATH_OPS,
    **SHAPE_OPS,
    **NN_OPS,
    **RNN_OPS,
    **IMAGE_OPS,
    **FOLD_OPS,
    **GRID_OPS,
    **LOSS_OPS,
    **SCAN_OPS,
    **LINALG_OPS,
    **SPECTRAL_OPS,
    **SPECIAL_OPS,
}
