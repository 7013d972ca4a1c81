"""aten ops -> gradflow expressions: one small handler per op, keyed by the op's name.

A handler gets a ``Call`` (the node's arguments as expression text or Python
values, its output shape) and returns the expression, an ``Alias`` (the node is
another name: clone, contiguous) or a ``Parts`` (one expression per output, for
split and max). ``Unsupported`` says why an op, or one use of it, has no exact
gradflow equivalent; the importer turns it into an error at the user's line.
"""

from __future__ import annotations

from dataclasses import dataclass


class Unsupported(Exception):
    """This call has no exact gradflow equivalent (the message says what is missing)."""


@dataclass
class Alias:
    name: str


@dataclass
class Parts:
    exprs: list


@dataclass
class Call:
    """One aten call: its arguments (names of tensors as text, other values as Python values)."""
    args: list
    kwargs: dict
    shape: tuple                     # output shape (first output for several)
    shapes: list                     # input shapes by position (None for non-tensors)
    overload: str
    kinds: list = None               # input kinds by position: "float", "int", "bool" or None
    kind: str = "float"              # the output's kind

    def arg(self, i: int, name: str, default=None):
        if i < len(self.args):
            return self.args[i]
        return self.kwargs.get(name, default)

    def ndim(self, i: int = 0) -> int:
        return len(self.shapes[i])


def text(value) -> str:
    """A Python value as gradflow expression text."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, float):
        if value != value:
            raise Unsupported("a NaN constant")
        if value in (float("inf"), float("-inf")):
            # gradflow expressions have no infinity; a huge finite number masks the same way
            return "1e300" if value > 0 else "-1e300"
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(text(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


def axes(dims, ndim: int):
    """A dim or list of dims -> an axis attribute text (one int or a tuple)."""
    if dims is None or dims == []:
        return None
    if isinstance(dims, int):
        return str(dims)
    return text(tuple(d % ndim for d in dims))


def reduce(op: str, c: Call, dims_at: int = 1, keep_at: int = 2) -> str:
    axis = axes(c.arg(dims_at, "dim"), c.ndim())
    keep = c.arg(keep_at, "keepdim", False)
    if axis is None and not keep:
        return f"{op}({c.args[0]})"
    return f"{op}({c.args[0]}, axis={axis}, keepdims={keep})"


def unary(op):
    return lambda c: f"{op}({c.args[0]})"


def binary(symbol):
    def handler(c):
        a, b = text(c.args[0]), text(c.args[1])
        alpha = c.kwargs.get("alpha", c.args[2] if len(c.args) > 2 else 1)
        if alpha != 1 and symbol in "+-":
            b = f"{text(alpha)} * {b}"
        return f"{a} {symbol} {b}" if symbol != "r-" else f"{b} - {a}"
    return handler


def compare(op):
    return lambda c: f"{op}({text(c.args[0])}, {text(c.args[1])})"


def div(c):
    mode = c.kwargs.get("rounding_mode")
    if mode == "trunc":
        raise Unsupported("with rounding_mode='trunc'")
    expr = f"{text(c.args[0])} / {text(c.args[1])}"
    return f"floor({expr})" if mode == "floor" else expr


def linear(c):
    x, w, b = c.args[0], c.args[1], c.arg(2, "bias")
    return f"{x} @ transpose({w})" + (f" + {b}" if b is not None else "")


def addmm(c):
    if c.kwargs.get("beta", 1) != 1 or c.kwargs.get("alpha", 1) != 1:
        raise Unsupported("with beta or alpha")
    return f"{c.args[0]} + {c.args[1]} @ {c.args[2]}"


def permutation(c, order):
    return f"transpose({c.args[0]}, axes={text(tuple(d % c.ndim() for d in order))})"


def transpose(c):
    order = list(range(c.ndim()))
    d0, d1 = c.args[1] % c.ndim(), c.args[2] % c.ndim()
    order[d0], order[d1] = order[d1], order[d0]
    return permutation(c, order)


def shape_text(shape) -> str:
    return "[" + ", ".join(str(int(n)) for n in shape) + "]"


def reshape(c):
    return f"reshape({c.args[0]}, {shape_text(c.shape)})"


def broadcast(c):
    return f"broadcast_to({c.args[0]}, {text(tuple(c.shape))})"


def clip(c):
    lo, hi = c.arg(1, "min"), c.arg(2, "max")
    if c.overload == "Tensor":
        expr = c.args[0] if lo is None else f"maximum({c.args[0]}, {lo})"
        return expr if hi is None else f"minimum({expr}, {hi})"
    return f"clip({c.args[0]}, {text(lo)}, {text(hi)})"


def variance(c):
    dims = c.arg(1, "dim")
    correction = c.kwargs.get("correction", 1 if c.arg(2, "unbiased", True) is not False else 0)
    shape = c.shapes[0]
    n = 1
    for d in (range(len(shape)) if not dims else [d % len(shape) for d in dims]):
        n *= shape[d]
    keep = c.kwargs.get("keepdim", False)
    axis = axes(dims, c.ndim())
    expr = f"var({c.args[0]}, axis={axis}, keepdims={keep})"
    return expr if not correction else f"{expr} * {n / (n - correction)!r}"


def softmax(op):
    return lambda c: f"{op}({c.args[0]}, axis={c.args[1]})"


def norm(c):
    if c.arg(1, "ord", 2) != 2:
        raise Unsupported("with an order other than 2")
    return reduce("norm", c, 2, 3)


def gelu(c):
    approximate = c.kwargs.get("approximate", "none")
    return f"gelu({c.args[0]})" if approximate == "tanh" else f"gelu({c.args[0]}, approximate='none')"


def softplus(c):
    beta, threshold = c.arg(1, "beta", 1), c.arg(2, "threshold", 20)
    if beta == 1:
        return f"softplus({c.args[0]})"
    return f"softplus({c.args[0]} * {text(beta)}) / {text(beta)}"


def cross_entropy(c):
    weight, reduction = c.arg(2, "weight"), c.arg(3, "reduction", 1)
    smoothing = c.arg(5, "label_smoothing", 0.0)
    if weight is not None or reduction != 1 or smoothing or c.ndim() != 2 or c.ndim(1) != 1:
        raise Unsupported("beyond mean reduction over [N, C] logits and [N] class labels")
    return f"cross_entropy({c.args[0]}, {c.args[1]})"


def reduced(expr: str, reduction: int) -> str:
    return {0: expr, 1: f"mean({expr})", 2: f"sum({expr})"}[reduction]


def mse(c):
    reduction = c.arg(2, "reduction", 1)
    return f"mse({c.args[0]}, {c.args[1]})" if reduction == 1 else \
        reduced(f"square({c.args[0]} - {c.args[1]})", reduction)


def bce_logits(c):
    if c.arg(2, "weight") is not None or c.arg(3, "pos_weight") is not None:
        raise Unsupported("with weight or pos_weight")
    x, y = c.args[0], c.args[1]
    return reduced(f"softplus({x}) - {x} * {y}", c.arg(4, "reduction", 1))


def bce(c):
    if c.arg(2, "weight") is not None or c.arg(3, "reduction", 1) != 1:
        raise Unsupported("with weight or a reduction other than mean")
    return f"binary_cross_entropy({c.args[0]}, {c.args[1]})"


def layer_norm(c):
    shape, w, b, eps = c.args[1], c.arg(2, "weight"), c.arg(3, "bias"), c.arg(4, "eps", 1e-5)
    if len(shape) != 1 or w is None or b is None:
        raise Unsupported("over more than the last axis, or without weight and bias")
    return f"layer_norm({c.args[0]}, {w}, {b}, eps={eps!r})"


def batch_norm(c):
    x, w, b, mean, var, training, _, eps = (c.args + [None] * 9)[:8]
    if w is None or b is None:
        raise Unsupported("without affine weight and bias")
    if training:
        return f"batch_norm({x}, {w}, {b}, eps={eps!r})"
    s = shape_text([c.shapes[0][1]] + [1] * (c.ndim() - 2))
    return (f"({x} - reshape({mean}, {s})) / sqrt(reshape({var}, {s}) + {eps!r}) * reshape({w}, {s})"
            f" + reshape({b}, {s})")


def embedding(c):
    if c.arg(2, "padding_idx", -1) != -1:
        raise Unsupported("with padding_idx (its row gets no gradient)")
    return f"take({c.args[0]}, {c.args[1]}, axis=0)"


def attention(c):
    q, k, v = c.args[:3]
    mask, dropout, causal = c.arg(3, "attn_mask"), c.arg(4, "dropout_p", 0.0), c.arg(5, "is_causal", False)
    scale = c.kwargs.get("scale", c.args[6] if len(c.args) > 6 else None)
    if dropout or c.kwargs.get("enable_gqa"):
        raise Unsupported("with dropout_p or enable_gqa")
    tail = f", scale={scale!r}" if scale is not None else ""
    if mask is not None:
        if causal:
            raise Unsupported("with both attn_mask and is_causal")
        return f"masked_attention({q}, {k}, {v}, {mask}{tail})"
    return f"scaled_dot_product_attention({q}, {k}, {v}, is_causal={bool(causal)}{tail})"


def dropout(c):
    p, train = c.arg(1, "p", 0.5), c.arg(2, "train", True)
    return Alias(c.args[0]) if not train or not p else f"dropout({c.args[0]}, {p!r})"


def concat(op):
    return lambda c: f"{op}([{', '.join(c.args[0])}], axis={c.arg(1, 'dim', 0)})"


def index_text(ndim: int, dim: int, item: str) -> str:
    return "[" + ", ".join([":"] * (dim % ndim) + [item]) + "]"


def slice_(c):
    dim, start, end, step = c.arg(1, "dim", 0), c.arg(2, "start"), c.arg(3, "end"), c.arg(4, "step", 1)
    size = c.shapes[0][dim % c.ndim()]
    end = None if end is not None and end >= size else end
    item = f"{'' if start in (None, 0) else start}:{'' if end is None else end}" + (f":{step}" if step != 1 else "")
    return c.args[0] + index_text(c.ndim(), dim, item)


def select(c):
    return c.args[0] + index_text(c.ndim(), c.args[1], str(c.args[2]))


def index(c):
    found = [(d, i) for d, i in enumerate(c.args[1]) if i is not None]
    if len(found) != 1:
        raise Unsupported("with more than one index tensor")
    return f"take({c.args[0]}, {found[0][1]}, axis={found[0][0]})"


def gather(c):
    return f"take_along_axis({c.args[0]}, {c.args[2]}, axis={c.args[1] % c.ndim()})"


def pieces(c, sizes, dim) -> Parts:
    dim, start, out = dim % c.ndim(), 0, []
    for size in sizes:
        out.append(c.args[0] + index_text(c.ndim(), dim, f"{start}:{start + size}"))
        start += size
    return Parts(out)


def split(c):
    dim, total = c.arg(2, "dim", 0), c.shapes[0][c.arg(2, "dim", 0)]
    size = c.args[1]
    sizes = list(size) if isinstance(size, (list, tuple)) else \
        [min(size, total - s) for s in range(0, total, size)]
    return pieces(c, sizes, dim)


def chunk(c):
    dim = c.arg(2, "dim", 0)
    total = c.shapes[0][dim]
    size = -(-total // c.args[1])
    return pieces(c, [min(size, total - s) for s in range(0, total, size)], dim)


def unbind(c):
    dim = c.arg(1, "dim", 0) % c.ndim()
    return Parts([c.args[0] + index_text(c.ndim(), dim, str(i)) for i in range(c.shapes[0][dim])])


def max_dim(op, arg):
    def handler(c):
        if c.overload != "dim":
            return f"{op}({c.args[0]})"
        keep = c.arg(2, "keepdim", False)
        return Parts([f"{f}({c.args[0]}, axis={c.args[1]}, keepdims={keep})" for f in (op, arg)])
    return handler


def conv2d(c):
    x, w, b = c.args[:3]
    stride, padding = c.arg(3, "stride", 1), c.arg(4, "padding", 0)
    if c.arg(5, "dilation", 1) not in (1, [1, 1], (1, 1)) or c.arg(6, "groups", 1) != 1:
        raise Unsupported("with dilation or groups")
    if isinstance(padding, str):
        raise Unsupported(f"with padding={padding!r}")
    expr = f"conv2d({x}, {w}, stride={text(tuple(stride))}, padding={text(tuple(padding))})"
    return expr if b is None else f"{expr} + reshape({b}, [{c.shapes[1][0]}, 1, 1])"


def pool(op):
    def handler(c):
        kernel, stride = c.args[1], c.arg(2, "stride") or c.args[1]
        ceil_mode = c.arg(5 if op == "max_pool2d" else 4, "ceil_mode", False)
        if c.arg(3, "padding", 0) not in (0, [0, 0]) or ceil_mode:
            raise Unsupported("with padding or ceil_mode")
        return f"{op}({c.args[0]}, {text(tuple(kernel))}, {text(tuple(stride))})"
    return handler


def adaptive_avg(c):
    size = tuple(c.args[1])
    h, w = c.shapes[0][-2:]
    if size == (1, 1):
        return f"mean({c.args[0]}, axis=({c.ndim() - 2}, {c.ndim() - 1}), keepdims=True)"
    if h % size[0] or w % size[1]:
        raise Unsupported("to a size that does not divide the input")
    kernel = (h // size[0], w // size[1])
    return f"avg_pool2d({c.args[0]}, {text(kernel)}, {text(kernel)})"


def cosine(c):
    return f"cosine_similarity({c.args[0]}, {c.args[1]}, axis={c.arg(2, 'dim', 1)}, eps={c.arg(3, 'eps', 1e-8)!r})"


def masked_fill(c):
    return f"where({c.args[1]}, {text(c.args[2])}, {c.args[0]})"


def rounding(c):
    if c.overload != "default":
        raise Unsupported("with decimals")
    return f"round({c.args[0]})"


def broadcast_tensors(c):
    """Each tensor broadcast to the common shape (itself where it already has it)."""
    out = []
    for name, shape in zip(c.args[0], c.shapes[0]):
        out.append(Alias(name) if tuple(shape) == tuple(c.shape) else f"broadcast_to({name}, {text(tuple(c.shape))})")
    return Parts(out)


def convert(c):
    """`.to(dtype)`, `.double()`, `.long()`: gradflow holds floats, ints, and bools as 0/1 floats."""
    source, target = c.kinds[0], c.kind
    if source == target or (source == "bool" and target == "float"):
        return Alias(c.args[0])
    if target == "float":
        return f"{c.args[0]} * 1.0"
    if target == "bool":
        return f"not_equal({c.args[0]}, 0)"
    raise Unsupported(f"from {source} to {target}")


def identity(c):
    return Alias(c.args[0])


OPS = {
    **{op: unary(op) for op in ("relu", "sigmoid", "tanh", "exp", "log", "sqrt", "abs", "neg", "sin",
                                "cos", "log1p", "sign", "floor", "ceil", "square")},
    "round": rounding,
    "silu": lambda c: f"{c.args[0]} * sigmoid({c.args[0]})",
    "rsqrt": lambda c: f"1 / sqrt({c.args[0]})",
    "reciprocal": lambda c: f"1 / {c.args[0]}",
    "gelu": gelu, "softplus": softplus,
    "leaky_relu": lambda c: f"leaky_relu({c.args[0]}, slope={c.arg(1, 'negative_slope', 0.01)!r})",
    "elu": lambda c: f"elu({c.args[0]}, alpha={c.arg(1, 'alpha', 1.0)!r})",
    "hardtanh": lambda c: f"clip({c.args[0]}, {c.arg(1, 'min_val', -1.0)!r}, {c.arg(2, 'max_val', 1.0)!r})",
    "clamp": clip, "clip": clip,
    "clamp_min": lambda c: f"clip({c.args[0]}, {text(c.args[1])}, None)",
    "clamp_max": lambda c: f"clip({c.args[0]}, None, {text(c.args[1])})",
    "add": binary("+"), "sub": binary("-"), "rsub": binary("r-"), "mul": binary("*"), "div": div,
    "pow": binary("**"), "maximum": compare("maximum"), "minimum": compare("minimum"),
    "gt": compare("greater"), "lt": compare("less"), "ge": compare("greater_equal"),
    "le": compare("less_equal"), "eq": compare("equal"), "ne": compare("not_equal"),
    "where": lambda c: f"where({text(c.args[0])}, {text(c.args[1])}, {text(c.args[2])})",
    "masked_fill": masked_fill,
    "matmul": binary("@"), "mm": binary("@"), "bmm": binary("@"), "addmm": addmm, "linear": linear,
    "t": lambda c: f"transpose({c.args[0]})", "transpose": transpose,
    "permute": lambda c: permutation(c, c.args[1]),
    **{op: reshape for op in ("view", "reshape", "_unsafe_view", "flatten", "unflatten", "squeeze",
                              "unsqueeze", "view_as", "reshape_as")},
    **{op: broadcast for op in ("expand", "expand_as", "broadcast_to")},
    "broadcast_tensors": broadcast_tensors,
    **{op: identity for op in ("contiguous", "clone", "alias", "lift_fresh_copy")},
    **{op: convert for op in ("to", "_to_copy", "type_as")},
    "detach": lambda c: f"stop_gradient({c.args[0]})",
    "sum": lambda c: reduce("sum", c), "mean": lambda c: reduce("mean", c),
    "amax": lambda c: reduce("max", c), "amin": lambda c: reduce("min", c),
    "max": max_dim("max", "argmax"), "min": max_dim("min", "argmin"),
    "argmax": lambda c: reduce("argmax", c), "argmin": lambda c: reduce("argmin", c),
    "logsumexp": lambda c: reduce("logsumexp", c), "var": variance,
    "std": lambda c: f"sqrt({variance(c)})", "linalg_vector_norm": norm,
    "softmax": softmax("softmax"), "_softmax": softmax("softmax"),
    "log_softmax": softmax("log_softmax"), "_log_softmax": softmax("log_softmax"),
    "cross_entropy_loss": cross_entropy, "mse_loss": mse, "binary_cross_entropy": bce,
    "binary_cross_entropy_with_logits": bce_logits,
    "l1_loss": lambda c: reduced(f"abs({c.args[0]} - {c.args[1]})", c.arg(2, "reduction", 1)),
    "layer_norm": layer_norm, "batch_norm": batch_norm, "embedding": embedding,
    "scaled_dot_product_attention": attention, "dropout": dropout,
    "cat": concat("concat"), "concat": concat("concat"), "stack": concat("stack"),
    "slice": slice_, "select": select, "index": index, "gather": gather,
    "split": split, "split_with_sizes": split, "chunk": chunk, "unbind": unbind,
    "one_hot": lambda c: f"one_hot({c.args[0]}, {c.args[1]})",
    "conv2d": conv2d, "max_pool2d": pool("max_pool2d"), "avg_pool2d": pool("avg_pool2d"),
    "adaptive_avg_pool2d": adaptive_avg, "cosine_similarity": cosine,
}
