"""OPS: the one table of operations. An op is one entry, nothing more.

Each entry gives the forward (on numpy arrays), one vector-Jacobian product per
tensor input (``None``: no gradient ever passes through that input), a shape
rule that works on shapes alone (so models far larger than memory can still be
checked), the output dtype and a one-line doc. ``gradflow ops`` prints this table.

A vjp is called as ``vjp(g, ans, *inputs, **attrs)`` and returns the gradient for
its input in the *broadcast* shape; the tape sums it back to the input's shape.
Static arguments (``axis``, ``keepdims``, ``slope``, an index) are attributes,
never tensors, and carry no gradient. Rules compute in the dtype of ``g`` and the
inputs (Python numbers only), so a float32 tape stays float32.

Shape rules live in ``shapes.py`` and ``shapes_nn.py``, array code too long for a
lambda in ``kernels.py`` and its kin (``kernels_conv``, ``kernels_grid``, ``kernels_linalg``, ``kernels_linalg_ex``,
``kernels_math``, ``kernels_nn``, ``kernels_scan``, ``kernels_spectral``); this module holds the Op type and the
table itself.

kinds: ``differentiable``; ``stop`` (explicit stop-gradient, identity forward);
``implicit`` (non-differentiable op: every input is cut).

Conventions follow PyTorch/numpy: ties in max/min/argmax go to the first index,
``maximum``/``minimum`` split the gradient in half on ties, ``gelu`` is the tanh
approximation, ``var`` is the population variance, losses average. A rule that
masks selects (``np.where``) wherever PyTorch's does, so an infinite upstream
gradient gives 0 where the mask is off, not 0 * inf = NaN; where PyTorch multiplies
(abs at 0, pow's exponent rule) so do we.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from gradflow.engine.kernels import (
    check_indices,
    bce_vjp_p, bce_vjp_y, binary_cross_entropy, clip_vjp, concat_vjp, cross_entropy, cross_entropy_vjp, elu,
    expand_reduced, extremum_vjp, gelu, gelu_vjp, getitem_vjp, layer_norm_vjp_x, log_softmax, logsumexp,
    matmul_vjp_a, matmul_vjp_b, norm_vjp, normalised, pow_vjp_base, pow_vjp_exponent, reduce_extreme_vjp, sigmoid,
    softmax, take_along_axis_vjp, take_vjp, tanh_vjp, transpose_vjp, var_vjp,
)
from gradflow.engine.kernels_conv import avg_pool_vjp, conv, conv_vjp_w, conv_vjp_x, max_pool_vjp, pool_windows
from gradflow.engine.kernels_grid import grid_sample, grid_sample_vjp_grid, grid_sample_vjp_x
from gradflow.engine.kernels_linalg import (
    cholesky, cholesky_vjp, det, det_shape, det_sign, det_vjp, inv, inv_vjp, logabsdet, logabsdet_vjp, logdet,
    logdet_vjp, matrix_shape, solve, solve_shape, solve_triangular, solve_triangular_shape, solve_triangular_vjp_a,
    solve_triangular_vjp_b, solve_vjp_a, solve_vjp_b,
)
from gradflow.engine.kernels_linalg_ex import cholesky_ex, cholesky_ex_info, inv_ex, inv_ex_info
from gradflow.engine.kernels_spectral import (
    eigvalsh, eigvalsh_shape, eigvalsh_vjp, eigvecsh, eigvecsh_vjp, matrix_exp, matrix_exp_vjp, qr_q, qr_q_shape,
    qr_q_vjp, qr_r, qr_r_shape, qr_r_vjp, svd_u, svd_u_shape, svd_u_vjp, svd_vh, svd_vh_shape, svd_vh_vjp, svdvals,
    svdvals_shape, svdvals_vjp,
)
from gradflow.engine.kernels_math import (
    atan2_vjp_x, atan2_vjp_y, floor_divide, fmod, fmod_vjp_b, remainder, remainder_vjp_b, trunc_divide,
    HALF_SQRT_PI, digamma, erfinv, lgamma, trigamma, xlogy, xlogy_vjp_x, xlogy_vjp_y,
)
from gradflow.engine.kernels_nn import (
    attention, attention_vjp, batch_norm, batch_norm_vjp_beta, batch_norm_vjp_gamma, batch_norm_vjp_x, bernoulli,
    cosine_similarity, cosine_vjp, dropout, dropout_vjp, embedding, embedding_vjp, erf, erf_vjp, erfc, gelu_exact,
    gelu_exact_vjp, linear, linear_vjp_w, multinomial, normal, silu, silu_vjp,
)
from gradflow.engine.kernels_scan import (
    argsort, cumprod_vjp, logcumsumexp_vjp, prod_vjp, reversed_cumsum, running_arg, scatter, scatter_add,
    scatter_reduce, scatter_reduce_vjp_src, scatter_reduce_vjp_x, scatter_vjp_src, scatter_vjp_x, searchsorted,
)
from gradflow.engine.shapes import (
    arg_shape, axis_shape, broadcast_shape, broadcast_to_shape, concat_shape, expand_dims_shape, flatten_shape,
    index_shape, matmul_shape, multinomial_shape, one_hot_shape, permute_shape, reduce_shape, reshape_shape, same_shape,
    scalar_attrs_shape, scan_shape, scatter_shape, searchsorted_shape, squeeze_shape, stack_shape,
    take_along_axis_shape, take_shape, transpose_shape,
)
from gradflow.engine.shapes_nn import (
    attention_shape, batch_norm_shape, bce_shape, conv2d_shape, conv_shape, cosine_similarity_shape,
    cross_entropy_shape, dropout_shape, embedding_shape, grid_sample_shape, layer_norm_shape, linear_shape, loss_shape,
    masked_attention_shape, pool_shape, pool_shape_of, window_scratch, window_scratch_3d,
)
from gradflow.errors import ShapeError

REQUIRED = object()  # marks an attribute with no default


@dataclass(slots=True, eq=False, repr=False)
class Op:
    """One entry of the op table: forward, a gradient rule per input, shape rule and attributes."""
    name: str
    group: str
    inputs: tuple[str, ...]          # tensor arguments; ("*xs",) for a list of tensors
    forward: Callable
    vjps: tuple                      # one rule per input (variadic: one rule taking index=)
    shape: Callable                  # shape(*input_shapes, **attrs) -> output shape
    doc: str
    attrs: dict = field(default_factory=dict)   # static arguments -> default (or REQUIRED)
    modes: dict = field(default_factory=dict)   # a string argument -> the values it takes (gelu's approximate)
    kind: str = "differentiable"
    out: str = "promote"             # output dtype: promote | float | int | first
    int_inputs: tuple[int, ...] = ()  # inputs that must be integer tensors
    seeded: bool = False             # takes a `seed` attribute that a model gives each call its own of
    derivative: bool | Callable = True  # False, or attrs -> False: the rule is deliberately not the derivative
    gains: tuple[int, ...] = ()      # inputs that scale the output (layer_norm's gamma): ones by default
    scratch: Callable | None = None  # scratch(out_shape, *input_shapes, **attrs): elements of its largest temporary
    reads: tuple[str, ...] = ("ans", "inputs")   # the values its rules read; a value no rule reads need not be held
    variadic: bool = field(init=False, repr=False)  # takes a list of tensors (inputs == ("*xs",))
    plain: bool = field(init=False, repr=False)     # no attributes to bind, no integer inputs to check
    numbered: tuple = field(init=False, repr=False)  # ((0, vjp0), (1, vjp1), ...): the sweep's loop, made once
    reuses: bool = field(init=False, repr=False)    # a ufunc whose rules read no input: may write over one (Tape.run)
    fitted: bool = field(init=False, repr=False)    # one input, an output of its shape, no attributes

    def __post_init__(self):
        # Stored, not computed: the tape asks for every node.
        object.__setattr__(self, "variadic", self.inputs[:1] == ("*xs",))
        object.__setattr__(self, "plain", not self.attrs and not self.int_inputs)
        object.__setattr__(self, "numbered", tuple(enumerate(self.vjps)))
        object.__setattr__(self, "reuses", isinstance(self.forward, np.ufunc) and self.forward.nout == 1
                           and "inputs" not in self.reads)
        # One input, an output of its shape, no attributes (a numpy float64 scalar among them
        # could promote float32), not an integer result: the value has its input's shape, and a rule's gradient g's
        # shape and dtype, which are its input's. The tape takes both as they are.
        object.__setattr__(self, "fitted", self.shape is same_shape and len(self.inputs) == 1
                           and not self.variadic and not self.attrs and self.out != "int")

    @property
    def signature(self) -> str:
        """'(x, axis=None, keepdims=False)': how the op is called, for messages and `gradflow ops`."""
        inputs = ["[xs]"] if self.variadic else list(self.inputs)
        attrs = [k if v is REQUIRED else f"{k}={v!r}" for k, v in self.attrs.items()]
        return f"({', '.join(inputs + attrs)})"

    def bind_attrs(self, given: dict) -> dict:
        """Complete ``given`` with defaults; unknown or missing attributes raise TypeError.

        Lists become tuples, as numpy takes only tuples for ``axis``.
        """
        if not given and not self.attrs:
            return {}
        unknown = set(given) - set(self.attrs)
        if unknown:
            raise TypeError(f"{self.name}() got an unexpected argument {sorted(unknown)[0]!r}")
        bound = {**self.attrs, **given}
        missing = [k for k, v in bound.items() if v is REQUIRED]
        if missing:
            raise TypeError(f"{self.name}() is missing argument {missing[0]!r}")
        return {k: tuple(v) if isinstance(v, list) else v for k, v in bound.items()}

    def vjps_for(self, n_inputs: int) -> tuple:
        """One rule per input. A variadic op's rule is told its input's ``index`` and given a
        ``memo`` shared by the rules of one call, so one node: what every input's rule needs
        (a concat's offsets) is worked out once, not once per input (quadratic)."""
        if not self.variadic:
            return self.vjps
        rule, memo = self.vjps[0], {}
        return tuple(None if rule is None else functools.partial(rule, index=k, memo=memo) for k in range(n_inputs))

    def derives(self, attrs: dict) -> bool:
        """Are the rules the forward's derivative, with these attributes?"""
        return self.derivative(attrs) if callable(self.derivative) else self.derivative

    def has_rule(self, k: int) -> bool:
        """Does input ``k`` have a gradient rule? (``vjps_for`` without building a variadic
        op's partials, which all share its one rule.)"""
        return (self.vjps[0] if self.variadic else self.vjps[k]) is not None

    def numbered_for(self, n_inputs: int) -> tuple:
        """``(k, rule)`` for each of ``n_inputs`` inputs, in order."""
        return tuple(enumerate(self.vjps_for(n_inputs))) if self.variadic else self.numbered

    def infer_shape(self, *shapes, **attrs) -> tuple:
        """The shape rule, with the op's name leading every error message; a mode argument must
        be one of its values."""
        for key, values in self.modes.items():
            value = attrs.get(key, self.attrs[key])
            if value not in values:
                spelled = " or ".join([", ".join(f'"{v}"' for v in values[:-1]), f'"{values[-1]}"'])
                raise ShapeError(f"{self.name}: {key} must be {spelled}, not {value!r}")
        try:
            return tuple(self.shape(*shapes, **attrs))
        except ShapeError as e:
            message = str(e)
            if message.startswith(self.name):
                raise
            raise ShapeError(f"{self.name}: {message}") from None

    def check_dtypes(self, dtypes) -> None:
        for k in self.int_inputs:
            if dtype_kind(dtypes[k]) != "i":
                raise ShapeError(f"{self.name}: argument {self.inputs[k]!r} must be an integer tensor, "
                                 f"got {np.dtype(dtypes[k]).name}")

    def sets_dtype(self, k: int) -> bool:
        """Does input ``k`` take part in a ``promote`` output's dtype? An input that can carry
        gradient does, a where's condition or an index does not; so does every input of an op
        that no gradient passes (floor_divide's a and b)."""
        return self.kind != "differentiable" or self.has_rule(k)

    def out_dtype(self, dtypes, float_dtype) -> np.dtype:
        """The output dtype from the input dtypes alone (lazy tapes).

        ``promote`` looks only at the inputs that set it (``sets_dtype``), so a where's
        condition or an index never turns an integer result into a float one.
        """
        if self.out == "promote":
            dtypes = [d for k, d in enumerate(dtypes) if self.sets_dtype(k)]
        if self.out == "float" or (self.out == "promote" and any(dtype_kind(d) == "f" for d in dtypes)):
            return np.dtype(float_dtype)
        if self.out == "first":
            return np.dtype(dtypes[0])
        return np.dtype(np.int64)


def dtype_kind(dtype) -> str:
    """'f' for floating dtypes, 'i' for integer (and bool) ones, '' for None."""
    if dtype is None:
        return ""
    return "f" if np.dtype(dtype).kind == "f" else "i"


OPS: dict[str, Op] = {}
ALIASES = {"detach": "stop_gradient"}


def resolve_op(name: str) -> Op:
    return OPS[ALIASES.get(name, name)]


def defop(name, group, inputs, forward, vjps, shape, doc, **kw) -> None:
    OPS[name] = Op(name, group, tuple(inputs), forward, tuple(vjps), shape, doc, **kw)


# ================================================================ arithmetic
_BIN = dict(group="arithmetic", inputs=("a", "b"), shape=broadcast_shape)
defop("add", forward=np.add, vjps=(lambda g, ans, a, b: g, lambda g, ans, a, b: g),
      doc="a + b", reads=(), **_BIN)
defop("sub", forward=np.subtract, vjps=(lambda g, ans, a, b: g, lambda g, ans, a, b: -g),
      doc="a - b", reads=(), **_BIN)
defop("mul", forward=np.multiply, vjps=(lambda g, ans, a, b: g * b, lambda g, ans, a, b: g * a),
      doc="a * b", reads=("inputs",), **_BIN)
defop("div", forward=np.divide,
      vjps=(lambda g, ans, a, b: g / b, lambda g, ans, a, b: -g * ans / b),
      doc="a / b", out="float", **_BIN)
defop("pow", forward=np.power, vjps=(pow_vjp_base, pow_vjp_exponent),
      doc="a ** b", **_BIN)
defop("remainder", forward=remainder, vjps=(lambda g, ans, a, b: g, remainder_vjp_b),
      doc="a - floor(a / b) * b: the sign of b, as Python's % and torch.remainder; gradient 1 into a, "
          "-floor(a / b) into b, as torch's; integers stay integers (an integer b of 0 is an error, as in torch)",
      reads=("inputs",), **_BIN)
defop("fmod", forward=fmod, vjps=(lambda g, ans, a, b: g, fmod_vjp_b),
      doc="a - trunc(a / b) * b: the sign of a, as torch.fmod; gradient 1 into a, -trunc(a / b) into b, "
          "as torch's; integers stay integers (an integer b of 0 is an error, as in torch)",
      reads=("inputs",), **_BIN)
defop("matmul", "arithmetic", ("a", "b"), np.matmul, (matmul_vjp_a, matmul_vjp_b), matmul_shape,
      "a @ b: matrix product, batched over leading axes (numpy rules)", reads=("inputs",))
defop("neg", "arithmetic", ("x",), np.negative, (lambda g, ans, x: -g,), same_shape, "-x", reads=())

# ================================================================ elementwise
_EW = dict(group="elementwise", inputs=("x",), shape=same_shape, out="float")
defop("exp", forward=np.exp, vjps=(lambda g, ans, x: g * ans,), doc="e ** x", reads=("ans",), **_EW)
defop("log", forward=np.log, vjps=(lambda g, ans, x: g / x,), doc="natural logarithm", **_EW)
defop("log1p", forward=np.log1p, vjps=(lambda g, ans, x: g / (1 + x),),
      doc="log(1 + x), accurate for small x", **_EW)
defop("sqrt", forward=np.sqrt, vjps=(lambda g, ans, x: g / (2 * ans),), doc="square root", reads=("ans",), **_EW)
defop("square", forward=np.square, vjps=(lambda g, ans, x: g * 2 * x,), doc="x * x", **_EW)
defop("abs", forward=np.abs, vjps=(lambda g, ans, x: g * np.sign(x),),
      doc="|x|; gradient 0 at x == 0; an integer's is an integer", **{**_EW, "out": "promote"})
defop("sin", forward=np.sin, vjps=(lambda g, ans, x: g * np.cos(x),), doc="sine", **_EW)
defop("cos", forward=np.cos, vjps=(lambda g, ans, x: -g * np.sin(x),), doc="cosine", **_EW)
# torch's rules: 1 / sqrt(1 - x * x), so inf at |x| == 1 and NaN beyond, where the value is NaN too
defop("acos", forward=np.arccos, vjps=(lambda g, ans, x: g * -(1 / np.sqrt(1 - x * x)),),
      doc="arc cosine, in [0, pi]; NaN outside [-1, 1]; gradient -inf at x == +-1", reads=("inputs",), **_EW)
defop("asin", forward=np.arcsin, vjps=(lambda g, ans, x: g * (1 / np.sqrt(1 - x * x)),),
      doc="arc sine, in [-pi/2, pi/2]; NaN outside [-1, 1]; gradient inf at x == +-1", reads=("inputs",), **_EW)
defop("atan", forward=np.arctan, vjps=(lambda g, ans, x: g / (x * x + 1),),
      doc="arc tangent, in [-pi/2, pi/2]; gradient 0 at +-inf", reads=("inputs",), **_EW)
defop("tanh", forward=np.tanh, vjps=(tanh_vjp,),
      doc="hyperbolic tangent", reads=("ans",), **_EW)
defop("sigmoid", forward=sigmoid, vjps=(lambda g, ans, x: g * ans * (1 - ans),),
      doc="1 / (1 + e ** -x), computed without overflow", reads=("ans",), **_EW)
defop("relu", forward=lambda x: np.maximum(x, 0), vjps=(lambda g, ans, x: np.where(x <= 0, 0, g),),
      doc="max(x, 0); gradient 0 at x == 0", **_EW)
defop("leaky_relu", forward=lambda x, slope=0.01: np.where(x > 0, x, x * slope),
      vjps=(lambda g, ans, x, slope=0.01: np.where(x > 0, g, g * slope),),
      doc="x if x > 0 else slope * x", attrs={"slope": 0.01}, **_EW)
# torch's alpha e ** x below 0, not result + alpha: that rounds to 0 below about -37, where torch's is not
defop("elu", forward=elu,
      vjps=(lambda g, ans, x, alpha=1.0: np.where(x <= 0, g * (alpha * np.exp(np.minimum(x, 0))), g),),
      doc="x if x > 0 else alpha * (e ** x - 1)", attrs={"alpha": 1.0}, **_EW)
defop("gelu", forward=lambda x, approximate="tanh": gelu(x) if approximate == "tanh" else gelu_exact(x),
      vjps=(lambda g, ans, x, approximate="tanh":
            gelu_vjp(g, ans, x) if approximate == "tanh" else gelu_exact_vjp(g, x),),
      doc="x * Phi(x): the tanh approximation by default (PyTorch's approximate='tanh'), exact (erf) "
          "with approximate=\"none\" (PyTorch's default)",
      attrs={"approximate": "tanh"}, modes={"approximate": ("tanh", "none")}, **_EW)
defop("silu", forward=silu, vjps=(silu_vjp,), doc="x * sigmoid(x) (swish)", **_EW)
defop("softplus", forward=lambda x: np.logaddexp(0, x), vjps=(lambda g, ans, x: g * sigmoid(x),),
      doc="log(1 + e ** x), computed without overflow", **_EW)
defop("erf", forward=erf, vjps=(erf_vjp,), doc="the error function: 2 / sqrt(pi) times the integral of "
      "e ** -t ** 2 from 0 to x", reads=("inputs",), **_EW)
defop("erfc", forward=erfc, vjps=(lambda g, ans, x: -erf_vjp(g, ans, x),),
      doc="1 - erf(x), computed without cancellation where erf(x) is near 1", reads=("inputs",), **_EW)
# special functions: values and gradients as torch's at poles, infinities and NaN
defop("lgamma", forward=lgamma, vjps=(lambda g, ans, x: g * digamma(x),),
      doc="log |gamma(x)|; inf at 0 and the negative integers; gradient digamma(x)", reads=("inputs",), **_EW)
defop("digamma", forward=digamma, vjps=(lambda g, ans, x: g * trigamma(x),),
      doc="the derivative of lgamma; -inf at 0 (inf at -0), NaN at the negative integers; gradient trigamma(x), "
          "huge but finite at the negative integers, as torch's", reads=("inputs",), **_EW)
defop("erfinv", forward=erfinv, vjps=(lambda g, ans, x: g * (HALF_SQRT_PI * np.exp(ans * ans)),),
      doc="the inverse of erf; +-inf at +-1, NaN beyond; gradient sqrt(pi) / 2 * e ** erfinv(x) ** 2",
      reads=("ans",), **_EW)
defop("xlogy", "elementwise", ("x", "y"), xlogy, (xlogy_vjp_x, xlogy_vjp_y), broadcast_shape,
      "x * log(y), 0 where x == 0 (y 0 or inf too), NaN where y is NaN; gradients as torch's: log(y) into x, "
      "0 where x == 0 and y <= 0; x / y into y, NaN at x == y == 0", out="float", reads=("inputs",))
defop("clip", forward=lambda x, lo, hi: np.clip(x, lo, hi),
      vjps=(clip_vjp,),
      doc="x limited to [lo, hi] (either may be None); gradient passes where lo <= x <= hi",
      attrs={"lo": REQUIRED, "hi": REQUIRED}, **{**_EW, "shape": scalar_attrs_shape("lo", "hi")})
defop("hardtanh", forward=lambda x, lo=-1.0, hi=1.0: np.clip(x, lo, hi),
      vjps=(lambda g, ans, x, lo=-1.0, hi=1.0: np.where((x <= lo) | (x >= hi), 0, g),),
      doc="x limited to [lo, hi] as clip, but the gradient passes only where lo < x < hi (edges excluded), "
          "as PyTorch's hardtanh and relu6 (hardtanh(x, lo=0, hi=6))",
      attrs={"lo": -1.0, "hi": 1.0}, **{**_EW, "shape": scalar_attrs_shape("lo", "hi")})
defop("nan_to_num", forward=lambda x, nan=0.0, posinf=None, neginf=None:
      np.nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf),
      vjps=(lambda g, ans, x, nan=0.0, posinf=None, neginf=None: g * np.isfinite(x),),   # a multiply, as torch's
      doc="x with NaN, inf and -inf replaced: by default 0 and the dtype's largest and smallest "
          "finite numbers, as PyTorch's; no gradient where x is not finite",
      attrs={"nan": 0.0, "posinf": None, "neginf": None}, reads=("inputs",),
      **{**_EW, "out": "promote", "shape": scalar_attrs_shape("nan", "posinf", "neginf")})
_EW2 = dict(group="elementwise", inputs=("a", "b"), shape=broadcast_shape)
defop("maximum", forward=np.maximum, vjps=(extremum_vjp(0, np.greater), extremum_vjp(1, np.greater)),
      doc="elementwise larger of a and b; on ties each gets half the gradient", **_EW2)
defop("minimum", forward=np.minimum, vjps=(extremum_vjp(0, np.less), extremum_vjp(1, np.less)),
      doc="elementwise smaller of a and b; on ties each gets half the gradient", **_EW2)
defop("atan2", "elementwise", ("y", "x"), np.arctan2, (atan2_vjp_y, atan2_vjp_x), broadcast_shape,
      "the angle of the point (x, y) in [-pi, pi], as torch.atan2(y, x); both gradients 0 at (0, 0), "
      "as torch's", out="float", reads=("inputs",))
defop("where", "elementwise", ("cond", "a", "b"), lambda cond, a, b: np.where(cond, a, b),
      (None, lambda g, ans, cond, a, b: np.where(cond, g, 0),
       lambda g, ans, cond, a, b: np.where(cond, 0, g)),
      broadcast_shape, "a where cond is non-zero, else b; no gradient through cond")

# ================================================================ reductions
_RED = dict(group="reductions", inputs=("x",), shape=reduce_shape,
            attrs={"axis": None, "keepdims": False})
defop("sum", forward=lambda x, axis=None, keepdims=False: np.sum(x, axis=axis, keepdims=keepdims),
      vjps=(lambda g, ans, x, axis=None, keepdims=False:
            np.broadcast_to(expand_reduced(g, x.ndim, axis, keepdims), x.shape),),
      doc="sum over axis (all axes by default)", **_RED)
defop("mean", forward=lambda x, axis=None, keepdims=False: np.mean(x, axis=axis, keepdims=keepdims),
      vjps=(lambda g, ans, x, axis=None, keepdims=False:
            np.broadcast_to(expand_reduced(g, x.ndim, axis, keepdims), x.shape) * (np.size(ans) / x.size),),
      doc="mean over axis (all axes by default)", out="float", **_RED)
defop("prod", forward=lambda x, axis=None, keepdims=False: np.prod(x, axis=axis, keepdims=keepdims),
      vjps=(prod_vjp,), doc="product over axis (all axes by default); its gradient is PyTorch's, exact where x "
      "holds zeros: each entry's is the product of the others (so 0 beside two or more zeros)", **_RED)
_EXTREME = {**_RED, "attrs": {**_RED["attrs"], "ties": "first"}, "modes": {"ties": ("first", "split")}}
defop("max", forward=lambda x, axis=None, keepdims=False, ties="first": np.max(x, axis=axis, keepdims=keepdims),
      vjps=(reduce_extreme_vjp(np.argmax),),
      doc="maximum over axis; the gradient goes to the first maximal entry (torch.max(x, dim)), or "
          "shared by all of them with ties=\"split\" (torch.amax)", **_EXTREME)
defop("min", forward=lambda x, axis=None, keepdims=False, ties="first": np.min(x, axis=axis, keepdims=keepdims),
      vjps=(reduce_extreme_vjp(np.argmin),),
      doc="minimum over axis; the gradient goes to the first minimal entry (torch.min(x, dim)), or "
          "shared by all of them with ties=\"split\" (torch.amin)", **_EXTREME)
defop("logsumexp", forward=logsumexp,
      vjps=(lambda g, ans, x, axis=None, keepdims=False: expand_reduced(g, x.ndim, axis, keepdims)
            * np.exp(x - expand_reduced(ans, x.ndim, axis, keepdims)),),
      doc="log(sum(exp(x))) over axis, computed without overflow", out="float", **_RED)
defop("var", forward=lambda x, axis=None, keepdims=False: np.var(x, axis=axis, keepdims=keepdims),
      vjps=(var_vjp,), doc="population variance (ddof=0) over axis", out="float", **_RED)
defop("norm", forward=lambda x, axis=None, keepdims=False: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims)),
      vjps=(norm_vjp,), doc="L2 norm over axis; gradient 0 at a zero norm", out="float", **_RED)

# ================================================================ scans
_SCAN = dict(group="scans", inputs=("x",), shape=scan_shape, attrs={"axis": REQUIRED})
defop("cumsum", forward=lambda x, axis: np.cumsum(x, axis=axis),
      vjps=(lambda g, ans, x, axis: reversed_cumsum(g, axis),), doc="running sum along axis", reads=(), **_SCAN)
defop("cumprod", forward=lambda x, axis: np.cumprod(x, axis=axis), vjps=(cumprod_vjp,),
      doc="running product along axis; its gradient is PyTorch's, exact where x holds zeros", **_SCAN)
defop("logcumsumexp", forward=lambda x, axis: np.logaddexp.accumulate(x, axis=axis, dtype=np.result_type(x, 0.0)),
      vjps=(logcumsumexp_vjp,), out="float",
      doc="log of the running sum of exp(x) along axis, computed without overflow; the gradient is "
          "PyTorch's, NaN at an entry whose result is -inf", **_SCAN)

# ================================================================ shape
_SH = dict(group="shape", inputs=("x",), out="first")
defop("getitem", "shape", ("x",), lambda x, index=(): x[index], (getitem_vjp,), index_shape,
      "x[index]: integers, slices, None and ... (basic indexing)",
      attrs={"index": REQUIRED}, out="first")
defop("reshape", forward=lambda x, shape: np.reshape(x, shape),
      vjps=(lambda g, ans, x, shape: np.reshape(g, x.shape),), shape=reshape_shape,
      doc="x with a new shape of the same size; one size may be -1", attrs={"shape": REQUIRED}, **_SH)
defop("transpose", forward=lambda x, axes=None: np.transpose(x, axes), vjps=(transpose_vjp,),
      shape=transpose_shape, doc="permute the axes (reverse them by default)", attrs={"axes": None}, **_SH)
defop("expand_dims", forward=lambda x, axis: np.expand_dims(x, axis),
      vjps=(lambda g, ans, x, axis: np.reshape(g, x.shape),), shape=expand_dims_shape,
      doc="insert axes of size 1 at axis (int or tuple)", attrs={"axis": REQUIRED}, **_SH)
defop("squeeze", forward=lambda x, axis=None: np.squeeze(x, axis),
      vjps=(lambda g, ans, x, axis=None: np.reshape(g, x.shape),), shape=squeeze_shape,
      doc="remove axes of size 1 (all of them by default)", attrs={"axis": None}, **_SH)
defop("broadcast_to", forward=lambda x, shape: np.broadcast_to(x, shape),
      vjps=(lambda g, ans, x, shape: g,), shape=broadcast_to_shape,
      doc="x repeated to shape by numpy's broadcasting", attrs={"shape": REQUIRED}, **_SH)
defop("concat", "shape", ("*xs",), lambda *xs, axis=0: np.concatenate(xs, axis=axis), (concat_vjp,),
      concat_shape, "join tensors along an existing axis", attrs={"axis": 0})
defop("stack", "shape", ("*xs",), lambda *xs, axis=0: np.stack(xs, axis=axis),
      (lambda g, ans, *xs, axis=0, index, memo=None: np.take(g, index, axis=axis),),
      stack_shape, "join same-shape tensors along a new axis", attrs={"axis": 0})
defop("take", "shape", ("x", "idx"), lambda x, idx, axis=None: np.take(
          x, check_indices(idx, x.size if axis is None else x.shape[axis], negative=True), axis=axis),
      (take_vjp, None), take_shape, "x's entries at integer indices idx along axis (flattened by default)",
      attrs={"axis": None}, out="first", int_inputs=(1,))
defop("take_along_axis", "shape", ("x", "idx"),
      lambda x, idx, axis: np.take_along_axis(x, check_indices(idx, x.shape[axis]), axis),
      (take_along_axis_vjp, None), take_along_axis_shape,
      "x's entries at idx along axis, idx with x's number of axes (numpy rules)",
      attrs={"axis": REQUIRED}, out="first", int_inputs=(1,))
defop("scatter", "shape", ("x", "idx", "src"), scatter, (scatter_vjp_x, None, scatter_vjp_src), scatter_shape,
      "x with src written at idx along axis (idx with x's number of axes, no longer than x along the others "
      "and, as PyTorch's, not broadcast; src broadcast to idx); of repeated indices the last along axis is "
      "written, as PyTorch's scatter on CPU, and each gets its place's gradient",
      attrs={"axis": REQUIRED}, int_inputs=(1,), reads=("inputs",))
defop("scatter_add", "shape", ("x", "idx", "src"), scatter_add,
      (lambda g, ans, x, idx, src, axis: g, None, scatter_vjp_src), scatter_shape,
      "x with src added at idx along axis (idx with x's number of axes, no longer than x along the others "
      "and, as PyTorch's, not broadcast; src broadcast to idx); repeated indices add up",
      attrs={"axis": REQUIRED}, int_inputs=(1,), reads=("inputs",))
defop("scatter_reduce", "shape", ("x", "idx", "src"), scatter_reduce,
      (scatter_reduce_vjp_x, None, scatter_reduce_vjp_src),
      lambda x, idx, src, axis, reduce, include_self=True: scatter_shape(x, idx, src, axis),
      "x with src reduced in at idx along axis (idx and src as scatter_add's): reduce=\"amax\", \"amin\" or "
      "\"prod\" (no default, as in torch), x's own entry taking part unless include_self=False, as torch's "
      "scatter_reduce; "
      "the gradient is torch's: an extreme's split evenly among the entries equal to it, a product's exact "
      "beside zeros",
      attrs={"axis": REQUIRED, "reduce": REQUIRED, "include_self": True},
      modes={"reduce": ("amax", "amin", "prod")}, int_inputs=(1,))

# ================================================================ neural
_NN = dict(group="neural", out="float")
defop("softmax", inputs=("x",), forward=softmax,
      vjps=(lambda g, ans, x, axis=-1: ans * (g - np.sum(g * ans, axis=axis, keepdims=True)),),
      shape=axis_shape, doc="exp(x) / sum(exp(x)) over axis, computed without overflow",
      attrs={"axis": -1}, **_NN)
defop("log_softmax", inputs=("x",), forward=log_softmax,
      vjps=(lambda g, ans, x, axis=-1: g - np.exp(ans) * np.sum(g, axis=axis, keepdims=True),),
      shape=axis_shape, doc="x - logsumexp(x) over axis, computed without overflow",
      attrs={"axis": -1}, **_NN)
defop("layer_norm", inputs=("x", "gamma", "beta"),
      forward=lambda x, gamma, beta, eps=1e-5: normalised(x, eps)[0] * gamma + beta,
      vjps=(layer_norm_vjp_x, lambda g, ans, x, gamma, beta, eps=1e-5: g * normalised(x, eps)[0],
            lambda g, ans, x, gamma, beta, eps=1e-5: g),
      shape=layer_norm_shape, doc="normalise the last axis (eps=1e-5), then scale by gamma, shift by beta",
      attrs={"eps": 1e-5}, gains=(1,), **_NN)
defop("cross_entropy", inputs=("logits", "labels"), forward=cross_entropy, vjps=(cross_entropy_vjp, None),
      shape=cross_entropy_shape, doc="mean over N of -log softmax(logits)[label]; logits [N, C], labels [N]; "
      "rows labelled ignore_index count for nothing (every row: NaN, no gradient), as PyTorch's",
      attrs={"ignore_index": None}, int_inputs=(1,), **_NN)
defop("mse", inputs=("a", "b"), forward=lambda a, b: np.mean(np.square(a - b)),
      vjps=(lambda g, ans, a, b: g * 2 * (a - b) / np.broadcast(a, b).size,
            lambda g, ans, a, b: g * 2 * (b - a) / np.broadcast(a, b).size),
      shape=loss_shape, doc="mean squared error", **_NN)
defop("binary_cross_entropy", inputs=("p", "y"), forward=binary_cross_entropy, vjps=(bce_vjp_p, bce_vjp_y),
      shape=bce_shape, doc="mean of -(y log p + (1 - y) log(1 - p)) (reduction=\"sum\": the sum, \"none\": each); "
      "logs clamped at -100 (as PyTorch)", attrs={"reduction": "mean"},
      modes={"reduction": ("mean", "sum", "none")}, **_NN)
defop("dropout", inputs=("x",), forward=dropout, vjps=(dropout_vjp,), shape=dropout_shape,
      doc="zero each entry with probability p (mask from seed), scale the rest by 1/(1-p)",
      attrs={"p": REQUIRED, "seed": 0}, seeded=True, **_NN)
defop("conv2d", inputs=("x", "w"), forward=conv, vjps=(conv_vjp_x, conv_vjp_w), shape=conv2d_shape,
      doc="2-D cross-correlation: x [N, C, H, W], w [O, C, kH, kW]; stride and padding int or pair",
      attrs={"stride": 1, "padding": 0}, scratch=window_scratch, **_NN)
defop("max_pool2d", inputs=("x",),
      forward=lambda x, kernel, stride=None: np.max(pool_windows(x, kernel, stride), axis=-1),
      vjps=(max_pool_vjp(2),), shape=pool_shape,
      doc="maximum over windows of the last two axes; stride defaults to kernel; ties go to the first, "
          "a window's NaN wins (the last NaN takes the gradient, as torch's)",
      attrs={"kernel": REQUIRED, "stride": None}, scratch=window_scratch, **_NN)
defop("avg_pool2d", inputs=("x",),
      forward=lambda x, kernel, stride=None: np.mean(pool_windows(x, kernel, stride), axis=-1),
      vjps=(avg_pool_vjp(2),), shape=pool_shape,
      doc="mean over windows of the last two axes; stride defaults to kernel",
      attrs={"kernel": REQUIRED, "stride": None}, scratch=window_scratch, **_NN)
defop("conv3d", inputs=("x", "w"), forward=conv, vjps=(conv_vjp_x, conv_vjp_w), shape=conv_shape(3),
      doc="3-D cross-correlation: x [N, C, D, H, W], w [O, C, kD, kH, kW]; stride and padding int or triple",
      attrs={"stride": 1, "padding": 0}, scratch=window_scratch, **_NN)
defop("max_pool3d", inputs=("x",),
      forward=lambda x, kernel, stride=None: np.max(pool_windows(x, kernel, stride, 3), axis=-1),
      vjps=(max_pool_vjp(3),), shape=pool_shape_of(3),
      doc="maximum over windows of the last three axes, as max_pool2d (ties, NaN, stride)",
      attrs={"kernel": REQUIRED, "stride": None}, scratch=window_scratch_3d, **_NN)
defop("avg_pool3d", inputs=("x",),
      forward=lambda x, kernel, stride=None: np.mean(pool_windows(x, kernel, stride, 3), axis=-1),
      vjps=(avg_pool_vjp(3),), shape=pool_shape_of(3),
      doc="mean over windows of the last three axes; stride defaults to kernel",
      attrs={"kernel": REQUIRED, "stride": None}, scratch=window_scratch_3d, **_NN)
defop("grid_sample", inputs=("x", "grid"), forward=grid_sample, vjps=(grid_sample_vjp_x, grid_sample_vjp_grid),
      shape=grid_sample_shape,
      doc="x [N, C, H, W] read at the points of grid [N, Ho, Wo, 2] (x, y from -1 to 1), bilinear or nearest "
          "(3-D: x [N, C, D, H, W], grid [N, Do, Ho, Wo, 3]); padding_mode zeros, border or reflection; as "
          "torch's F.grid_sample, whose gradient into the grid is 0 for nearest and at a clipped point",
      attrs={"mode": "bilinear", "padding_mode": "zeros", "align_corners": False},
      modes={"mode": ("bilinear", "nearest"), "padding_mode": ("zeros", "border", "reflection")}, **_NN)
defop("one_hot", inputs=("idx",),
      forward=lambda idx, n: np.equal(np.expand_dims(check_indices(idx, n), -1), np.arange(n)),
      vjps=(None,), shape=one_hot_shape, doc="a float [..., n] that is 1 at each integer index",
      attrs={"n": REQUIRED}, int_inputs=(0,), **_NN)

# ================================================================ neural: what imported models need
defop("linear", inputs=("x", "w", "b"), forward=linear,
      vjps=(lambda g, ans, x, w, b: np.matmul(g, w), linear_vjp_w, lambda g, ans, x, w, b: g),
      shape=linear_shape, doc="x @ w.T + b, with PyTorch's weight layout: w [out, in], b [out]", **_NN)
defop("embedding", inputs=("idx", "weight"), forward=embedding, vjps=(None, embedding_vjp), shape=embedding_shape,
      doc="rows of weight [rows, dim] at integer indices idx (an index out of range is an error); "
          "the row padding_idx is read but gets no gradient, as PyTorch's",
      attrs={"padding_idx": None}, int_inputs=(0,), derivative=lambda attrs: attrs["padding_idx"] is None, **_NN)
defop("batch_norm", inputs=("x", "gamma", "beta"), forward=batch_norm,
      vjps=(batch_norm_vjp_x, batch_norm_vjp_gamma, batch_norm_vjp_beta), shape=batch_norm_shape,
      doc="training-mode batch norm of x [N, C, ...]: statistics over every axis but 1 (biased "
          "variance, eps=1e-5), then scale by gamma [C] and shift by beta [C]; no running statistics",
      attrs={"eps": 1e-5}, gains=(1,), **_NN)
defop("scaled_dot_product_attention", inputs=("q", "k", "v"),
      forward=lambda q, k, v, is_causal=False, scale=None: attention(q, k, v, None, is_causal, scale),
      vjps=tuple(attention_vjp(i, masked=False) for i in range(3)), shape=attention_shape,
      doc="softmax(q @ k^T * scale) @ v; q [..., L, E], k [..., S, E], v [..., S, Ev]; scale 1/sqrt(E) "
          "by default; is_causal masks as PyTorch (the top-left triangle)",
      attrs={"is_causal": False, "scale": None}, **_NN)
defop("masked_attention", inputs=("q", "k", "v", "mask"),
      forward=lambda q, k, v, mask, scale=None: attention(q, k, v, mask, False, scale),
      vjps=tuple(attention_vjp(i, masked=True) for i in range(4)), shape=masked_attention_shape,
      doc="scaled_dot_product_attention with a mask broadcast to [..., L, S]: an integer mask attends "
          "where it is non-zero (no gradient), a float mask is added to the scores (gradient as PyTorch)",
      attrs={"scale": None}, **_NN)
defop("cosine_similarity", inputs=("a", "b"), forward=cosine_similarity, vjps=(cosine_vjp(0), cosine_vjp(1)),
      shape=cosine_similarity_shape,
      doc="a.b / (max(|a|, eps) max(|b|, eps)) along axis, as PyTorch's F.cosine_similarity",
      attrs={"axis": 1, "eps": 1e-8}, **_NN)
defop("flatten", forward=lambda x, start_dim=0, end_dim=-1: np.reshape(x, flatten_shape(x.shape, start_dim, end_dim)),
      vjps=(lambda g, ans, x, start_dim=0, end_dim=-1: np.reshape(g, x.shape),), shape=flatten_shape,
      doc="axes start_dim..end_dim joined into one (as torch.flatten)", attrs={"start_dim": 0, "end_dim": -1},
      **_SH)
defop("permute", forward=lambda x, dims: np.transpose(x, dims),
      vjps=(lambda g, ans, x, dims: np.transpose(g, np.argsort([d % max(x.ndim, 1) for d in dims])),),
      shape=permute_shape, doc="the axes in the order dims (as torch.permute)", attrs={"dims": REQUIRED}, **_SH)

# ================================================================ gradient control
defop("stop_gradient", "gradient control", ("x",), lambda x: x, (None,), same_shape,
      "identity forward, no gradient backward (alias: detach)", kind="stop", out="first")
defop("no_grad", "gradient control", ("x",), lambda x: x, (None,), same_shape,
      "identity forward, no gradient backward: what leaves a torch.no_grad() block", kind="stop", out="first")
defop("grad_scale", "gradient control", ("x",), lambda x, s: x, (lambda g, ans, x, s: g * s,),
      scalar_attrs_shape("s"), "identity forward, gradient times s backward", attrs={"s": REQUIRED}, out="first",
      derivative=False)
defop("grad_reverse", "gradient control", ("x",), lambda x: x, (lambda g, ans, x: -g,), same_shape,
      "identity forward, gradient negated backward (domain-adversarial training)", out="first",
      derivative=False)

# ================================================================ non-differentiable
def to_int(x):
    """x truncated toward zero as int64; NaN, infinities and numbers beyond int64, which torch casts
    to no number in particular either, are cast quietly."""
    if x.dtype.kind != "f":
        return x.astype(np.int64, copy=False)
    with np.errstate(invalid="ignore"):
        return np.trunc(x).astype(np.int64)


# -- linear algebra: on the last two axes, batched over the others, as torch.linalg (kernels_linalg)
_LA = dict(group="linear algebra", inputs=("x",))
defop("inv", forward=inv, vjps=(inv_vjp,), shape=matrix_shape, reads=("ans",),
      doc="the inverse of each square matrix x [..., n, n], as torch.linalg.inv; a singular x is an error, as in "
          "torch", **_LA)
defop("det", forward=det, vjps=(det_vjp,), shape=det_shape,
      doc="the determinant of each square matrix, as torch.linalg.det; its gradient is torch's, det(x) x^-T, and "
          "0 where det(x) is 0 (torch's, not the adjugate)", **_LA)
defop("logabsdet", forward=logabsdet, vjps=(logabsdet_vjp,), shape=det_shape,
      doc="log |det x|, torch.linalg.slogdet's second output; gradient x^-T, NaN at a singular x (-inf)", **_LA)
defop("det_sign", forward=det_sign, vjps=(None,), shape=det_shape, kind="implicit", reads=(),
      doc="-1, 0 or 1: the sign of det x, torch.linalg.slogdet's first output; no gradient, as in torch", **_LA)
defop("logdet", forward=logdet, vjps=(logdet_vjp,), shape=det_shape, reads=("inputs",),
      doc="log det x, as torch.logdet: NaN where det x < 0 (no gradient there, as torch's), -inf where it is 0",
      **_LA)
defop("cholesky", forward=cholesky, vjps=(cholesky_vjp,), shape=matrix_shape, attrs={"upper": False},
      reads=("ans",),
      doc="the lower triangular L with L L^T = x (upper=True: L^T), as torch.linalg.cholesky, of (x + x^T) / 2 "
          "(torch reads one triangle: the same for a symmetric x), so torch's symmetric gradient is its "
          "derivative; an x that is not positive-definite is an error, as in torch", **_LA)
defop("solve", inputs=("a", "b"), forward=solve, vjps=(solve_vjp_a, solve_vjp_b), shape=solve_shape,
      doc="x with a x = b, as torch.linalg.solve: b is a vector [..., n] if it has one axis, or a's sizes but "
          "the last, else [..., n, k]; a singular a is an error, as in torch", group="linear algebra")
defop("solve_triangular", inputs=("a", "b"), forward=solve_triangular,
      vjps=(solve_triangular_vjp_a, solve_triangular_vjp_b), shape=solve_triangular_shape,
      attrs={"upper": REQUIRED, "left": True, "unitriangular": False},
      doc="x with a x = b (left=False: x a = b), b [..., n, k] ([..., k, n]), for a's upper or lower triangle "
          "(unitriangular: ones on its diagonal), as torch.linalg.solve_triangular: the rest of a is not read and "
          "gets no gradient; a 0 on the diagonal gives inf and NaN, as in torch", group="linear algebra")
# spectral decompositions (kernels_spectral): one op per output, torch's gradients, inf and NaN where it divides
# by a 0 gap between repeated eigenvalues (singular values); vector signs fixed: largest entry positive
_SYM = "of (x + x^T) / 2, as torch.linalg.eigh (torch reads one triangle, UPLO: the same for a symmetric x)"
defop("eigvalsh", forward=eigvalsh, vjps=(eigvalsh_vjp,), shape=eigvalsh_shape, reads=("inputs",),
      doc=f"the eigenvalues [..., n], ascending, {_SYM}; gradient V diag(g) V^T, finite at repeated eigenvalues",
      **_LA)
defop("eigvecsh", forward=eigvecsh, vjps=(eigvecsh_vjp,), shape=matrix_shape, reads=("inputs",),
      doc=f"the eigenvectors as columns [..., n, n], in the eigenvalues' order, {_SYM}; each signed so that its "
          "largest entry is positive (torch's sign is not determined); torch's gradient, inf and NaN at repeated "
          "eigenvalues", **_LA)
defop("svdvals", forward=svdvals, vjps=(svdvals_vjp,), shape=svdvals_shape, reads=("inputs",),
      doc="the singular values [..., k], k = min(m, n), descending, of x [..., m, n], as torch.linalg.svdvals; "
          "gradient U diag(g) V^T, finite at repeated ones", **_LA)
_SVD = ("as torch.linalg.svd (full_matrices=True: {full}, any basis of the rest, get no gradient, as in "
        "torch); each pair of singular vectors signed so that u's largest entry is positive; torch's gradient, inf "
        "and NaN at repeated singular values, and at 0 ones beyond the square")
defop("svd_u", forward=svd_u, vjps=(svd_u_vjp,), shape=svd_u_shape, reads=("inputs",),
      attrs={"full_matrices": False}, derivative=lambda attrs: not attrs["full_matrices"],
      doc="U [..., m, k] of x = U diag(S) Vh, " + _SVD.format(full="[..., m, m]: its extra columns"), **_LA)
defop("svd_vh", forward=svd_vh, vjps=(svd_vh_vjp,), shape=svd_vh_shape, reads=("inputs",),
      attrs={"full_matrices": False}, derivative=lambda attrs: not attrs["full_matrices"],
      doc="Vh [..., k, n] of x = U diag(S) Vh, " + _SVD.format(full="[..., n, n]: its extra rows"), **_LA)
defop("qr_q", forward=qr_q, vjps=(qr_q_vjp,), shape=qr_q_shape, reads=("inputs",),
      doc="Q [..., m, k], k = min(m, n), of x = Q R, as torch.linalg.qr (mode 'reduced'; LAPACK's signs, "
          "torch's); torch's gradient, inf and NaN where x's first k columns are dependent", **_LA)
defop("qr_r", forward=qr_r, vjps=(qr_r_vjp,), shape=qr_r_shape, reads=("inputs",),
      doc="R [..., k, n], upper triangular, of x = Q R, as torch.linalg.qr; torch's gradient, as qr_q's", **_LA)
defop("matrix_exp", forward=matrix_exp, vjps=(matrix_exp_vjp,), shape=matrix_shape, reads=("inputs",),
      doc="e^x of each square matrix, as torch.linalg.matrix_exp (scaling and squaring of a Pade approximant); "
          "its gradient is torch's, read off the exponential of [[x^T, g], [0, x^T]]; NaN or inf in x gives NaN",
      **_LA)
# torch.linalg's _ex forms (kernels_linalg_ex): where torch's info would not be 0, an error saying so
defop("inv_ex", forward=inv_ex, vjps=(inv_vjp,), shape=matrix_shape, reads=("ans",),
      doc="inv(x), as torch.linalg.inv_ex's inverse; a singular x, where torch gives info > 0 and no inverse, is "
          "an error", **_LA)
defop("cholesky_ex", forward=cholesky_ex, vjps=(cholesky_vjp,), shape=matrix_shape, attrs={"upper": False},
      reads=("ans",),
      doc="cholesky(x, upper), as torch.linalg.cholesky_ex's factor; an x that is not positive-definite, where "
          "torch gives info > 0 and a partial factor, is an error", **_LA)
defop("inv_ex_info", forward=inv_ex_info, vjps=(None,), shape=det_shape, kind="implicit", out="int", reads=(),
      doc="0 for each matrix, torch.linalg.inv_ex's info; a singular x (info > 0 in torch) is an error", **_LA)
defop("cholesky_ex_info", forward=cholesky_ex_info, vjps=(None,), shape=det_shape, kind="implicit", out="int",
      reads=(),
      doc="0 for each matrix, torch.linalg.cholesky_ex's info; an x that is not positive-definite (info > 0 in "
          "torch) is an error", **_LA)

_ND = dict(group="non-differentiable", kind="implicit")
defop("argmax", inputs=("x",), forward=lambda x, axis=None, keepdims=False:
      np.argmax(x, axis=axis, keepdims=keepdims), vjps=(None,), shape=arg_shape,
      doc="index of the first maximum over axis (of the flattened x by default)",
      attrs={"axis": None, "keepdims": False}, out="int", **_ND)
defop("argmin", inputs=("x",), forward=lambda x, axis=None, keepdims=False:
      np.argmin(x, axis=axis, keepdims=keepdims), vjps=(None,), shape=arg_shape,
      doc="index of the first minimum over axis (of the flattened x by default)",
      attrs={"axis": None, "keepdims": False}, out="int", **_ND)
defop("argsort", inputs=("x",), forward=argsort, vjps=(None,), shape=scan_shape,
      doc="the indices that sort x along axis (descending: largest first); ties in index order, NaN above "
          "every number, as torch.sort(stable=True)",
      attrs={"axis": -1, "descending": False}, out="int", **_ND)
defop("cumargmax", inputs=("x",), forward=running_arg(np.maximum), vjps=(None,), shape=scan_shape,
      doc="index of the running maximum along axis, as torch.cummax's: a later tie takes over, and from "
          "the first NaN on, the latest NaN",
      attrs={"axis": REQUIRED}, out="int", **_ND)
defop("cumargmin", inputs=("x",), forward=running_arg(np.minimum), vjps=(None,), shape=scan_shape,
      doc="index of the running minimum along axis, as torch.cummin's: a later tie takes over, and from "
          "the first NaN on, the latest NaN",
      attrs={"axis": REQUIRED}, out="int", **_ND)
defop("searchsorted", inputs=("boundaries", "x"), forward=searchsorted, vjps=(None, None),
      shape=searchsorted_shape,
      doc="where each x goes in boundaries sorted along their last axis: the first index whose entry is at or "
          "above x (right=True: above it), as torch.searchsorted and torch.bucketize (NaN as torch's search)",
      attrs={"right": False}, out="int", **_ND)
def whole(rounding):
    """A rounding that leaves an integer tensor as it is, integer, as torch's (numpy's floor of one
    is a float)."""
    return lambda x: x if x.dtype.kind != "f" else rounding(x)


for _name, _fn, _doc in [("round", np.round, "round half to even"), ("floor", np.floor, "round down"),
                         ("ceil", np.ceil, "round up"), ("trunc", np.trunc, "round toward zero")]:
    defop(_name, inputs=("x",), forward=whole(_fn), vjps=(None,), shape=same_shape,
          doc=f"{_doc}; an integer's is itself, an integer", **_ND)
defop("sign", inputs=("x",), forward=np.sign, vjps=(None,), shape=same_shape,
      doc="-1, 0 or 1; an integer's is an integer", **_ND)
# torch's gradient of a rounding division is 0 (floor_divide's is refused): an implicit cut, as floor's
defop("floor_divide", inputs=("a", "b"), forward=floor_divide, vjps=(None, None), shape=broadcast_shape,
      doc="a / b rounded down, as Python's // and torch.floor_divide compute it, from fmod(a, b): 1.0 // 0.1 is "
          "9.0 (0.1 is a little above a tenth), where floor(1.0 / 0.1) is 10.0; a float b of 0 gives a / b (+-inf, "
          "NaN for 0 / 0); integers stay integers (an integer b of 0 is an error, as in torch)", **_ND)
defop("trunc_divide", inputs=("a", "b"), forward=trunc_divide, vjps=(None, None), shape=broadcast_shape,
      doc="a / b rounded toward zero, as torch.div(a, b, rounding_mode=\"trunc\"): trunc(a / b) of floats; "
          "integers stay integers, divided exactly (an integer b of 0 is an error, as in torch)", **_ND)
defop("to_int", inputs=("x",), forward=to_int, vjps=(None,), shape=same_shape,
      doc="x as integers, its fractions cut off toward zero, as torch's .long() of a float", out="int", **_ND)
for _name, _fn, _sym in [("less", np.less, "<"), ("less_equal", np.less_equal, "<="),
                         ("greater", np.greater, ">"), ("greater_equal", np.greater_equal, ">="),
                         ("equal", np.equal, "=="), ("not_equal", np.not_equal, "!=")]:
    defop(_name, inputs=("a", "b"), forward=_fn, vjps=(None, None), shape=broadcast_shape,
          doc=f"a {_sym} b as 0.0 / 1.0", out="float", **_ND)
del _name, _fn, _doc, _sym

# ================================================================ random draws
_RND = dict(group="random", kind="implicit", seeded=True)
defop("bernoulli", inputs=("p",), forward=bernoulli, vjps=(None,), shape=same_shape,
      doc="1.0 with probability p, else 0.0 (drawn from seed), as torch.bernoulli",
      attrs={"seed": 0}, out="float", **_RND)
defop("normal", inputs=("mean", "std"), forward=normal, vjps=(None, None),
      shape=lambda mean, std, seed=0: broadcast_shape(mean, std),
      doc="mean + std * a standard normal draw (from seed), as torch.normal and a distribution's "
          "sample(); rsample's mean + std * noise is the form that passes gradient",
      attrs={"seed": 0}, out="float", **_RND)
defop("multinomial", inputs=("p",), forward=multinomial, vjps=(None,), shape=multinomial_shape,
      doc="n integer class indices per row of weights p [..., C], each drawn in proportion to its "
          "weight (from seed), as torch.multinomial and Categorical's sample()",
      attrs={"n": 1, "replacement": False, "seed": 0}, out="int", **_RND)
