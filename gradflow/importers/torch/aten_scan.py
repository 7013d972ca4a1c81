"""aten's scans, sorts and scatters -> gradflow expressions: cumsum, cumprod, logcumsumexp, cummax
and cummin, diff; sort, argsort, msort, topk, kthvalue and median; scatter (of values or a number),
scatter_add, index_add, scatter_reduce and index_reduce (sum, mean, amax, amin, prod); erf and erfc.

What a sort or a running maximum returns is x taken at the indices it returns (``take_along_axis``
of gradflow's ``argsort``, ``cumargmax``), so the gradient goes to the returned index, as torch's
does. gradflow orders ties by index, as torch.sort(stable=True). torch's own order of tied entries
is its algorithm's in a sort of more than 16 entries without stable=True, in topk and in kthvalue
(and topk's sorted=False leaves the order to it): there the values are torch's, but which of the
tied entries is returned, and takes the gradient, may not be (the README's From PyTorch says so).
torch.median along a dim breaks ties by index on the CPU, as gradflow does.
"""

from __future__ import annotations

import math

from gradflow.importers.torch.aten_index import integer
from gradflow.importers.torch.aten_shape import convert, converted
from gradflow.importers.torch.call import Alias, Parts, Unsupported, index_text, operand, shape_text, text


def scan(op):
    """cumsum and cumprod, in the output's kind (dtype=, or a bool's count as integers)."""
    def handler(c):
        if not c.ndim():   # a scalar's running sum or product is itself
            return convert(c)
        return f"{op}({converted(c.args[0], c.kinds.get(0), c.kind)}, axis={c.args[1] % c.ndim()})"
    return handler


def diff(c):
    """torch.diff: prepend and append joined to x along dim, then the differences of neighbours, n
    times (of booleans, whether neighbours differ, as torch's xor); n=0 gives x alone, as torch.
    Each round reads the one before twice: that one is a line of its own."""
    n, x = c.arg(1, "n", 1), c.args[0]
    if not n:
        return Alias(x)
    d = c.arg(2, "dim", -1) % c.ndim()
    joined = [t for t in (c.arg(3, "prepend"), x, c.arg(4, "append")) if t is not None]
    if len(joined) > 1:
        x = c.line(f"concat([{', '.join(joined)}], axis={d})", "joined")
    later, earlier = index_text(c.ndim(), d, "1:"), index_text(c.ndim(), d, ":-1")
    for k in range(n):
        if k:
            x = c.line(x, f"order{k}")
        x = f"not_equal({x}{later}, {x}{earlier})" if c.kind == "bool" else f"{x}{later} - {x}{earlier}"
    return x


def logcumsumexp(c):
    return Alias(c.args[0]) if not c.ndim() else f"logcumsumexp({c.args[0]}, axis={c.args[1] % c.ndim()})"


def itself(c) -> Parts:
    """A 0-d tensor's sort, top entry or running extreme: itself, at index 0."""
    return Parts([Alias(c.args[0]), integer(0)])


def picked(c, x: str, d: int, index: str) -> Parts:
    """(x at index along d, index): the index on a line of its own, which both read."""
    index = c.line(index, "indices")
    return Parts([f"take_along_axis({x}, {index}, axis={d})", Alias(index)])


def running(op):
    """cummax and cummin: the running extreme is x at the running arg-extreme."""
    def handler(c):
        if not c.ndim():
            return itself(c)
        d = c.args[1] % c.ndim()
        return picked(c, c.args[0], d, f"{op}({c.args[0]}, axis={d})")
    return handler


def order(c) -> tuple:
    """(dim, descending) of sort and argsort, in either form: (x, dim, descending) or (x, *,
    stable, dim, descending), whose keywords come as such."""
    return c.arg(1, "dim", -1), c.arg(2, "descending", False)


def argsort_of(x: str, ndim: int, dim: int, descending) -> str:
    more = ", descending=True" if descending else ""
    return f"argsort({x}, axis={dim % ndim}{more})"


def sort(c):
    dim, descending = order(c)
    if not c.ndim():
        return itself(c)
    return picked(c, c.args[0], dim % c.ndim(), argsort_of(c.args[0], c.ndim(), dim, descending))


def argsort(c):
    dim, descending = order(c)
    return integer(0) if not c.ndim() else argsort_of(c.args[0], c.ndim(), dim, descending)


def msort(c):
    """x sorted along its first axis (values only)."""
    if not c.ndim():
        return Alias(c.args[0])
    return f"take_along_axis({c.args[0]}, argsort({c.args[0]}, axis=0), axis=0)"


def topk(c):
    """The k largest (or smallest) along dim, largest first (smallest first), whatever ``sorted``
    says: torch leaves the order of sorted=False to its algorithm."""
    k, dim, largest = c.args[1], c.arg(2, "dim", -1), c.arg(3, "largest", True)
    if not c.ndim():
        return itself(c)
    d, n = dim % c.ndim(), c.shapes[0][dim % c.ndim()]
    index = argsort_of(c.args[0], c.ndim(), d, largest)
    if k < n:
        index = f"{index}{index_text(c.ndim(), d, f':{k}')}"
    return picked(c, c.args[0], d, index)


def kth_of(c, x: str, ndim: int, d: int, k: int, keep, nan_wins: bool = False) -> Parts:
    """(the k-th smallest of x along d, its index); ``nan_wins``: a slice holding NaN gives its first
    NaN instead, as torch.median."""
    index = f"argsort({x}, axis={d}){index_text(ndim, d, f'{k - 1}:{k}')}"
    if nan_wins:   # read twice: a line of its own
        nan = c.line(f"not_equal({x}, {x})", "nan")
        index = f"where(max({nan}, axis={d}, keepdims=True), argmax({nan}, axis={d}, keepdims=True), {index})"
    values, index = picked(c, x, d, index).exprs
    if keep:
        return Parts([values, index])
    return Parts([f"squeeze({values}, axis={d})", f"squeeze({index.name}, axis={d})"])


def kthvalue(c):
    """The k-th smallest along dim, and its index."""
    k, dim, keep = c.args[1], c.arg(2, "dim", -1), c.arg(3, "keepdim", False)
    if not c.ndim():
        return itself(c)
    return kth_of(c, c.args[0], c.ndim(), dim % c.ndim(), k, keep)


def median(c):
    """torch.median along dim: the lower of the two middle values (kthvalue's k = (n - 1) // 2 + 1),
    NaN where the slice holds one, and its index, which takes the gradient; or of every entry."""
    if c.overload == "default":
        return median_of_all(c)
    if c.overload != "dim":
        raise Unsupported(f"in its {c.overload!r} form")
    if not c.ndim():
        return itself(c)
    d = c.args[1] % c.ndim()
    keep = c.arg(2, "keepdim", False)
    return kth_of(c, c.args[0], c.ndim(), d, (c.shapes[0][d] - 1) // 2 + 1, keep, c.kinds.get(0) == "float")


def median_of_all(c):
    """torch.median(x): the middle of every entry, whose gradient torch shares evenly among the
    entries equal to it (among the NaNs where x holds one). A finite or infinite middle m is the
    split maximum of x where x == m (exactly m); -inf and NaN, which that cannot split, are the mean
    of the tied entries (exactly too: -inf, NaN)."""
    x, n = c.args[0], math.prod(c.shapes[0])
    if not c.ndim():
        return Alias(x)
    if c.ndim() > 1:
        x = c.line(f"reshape({x}, [{n}])", "flat")
    middle = kth_of(c, x, 1, 0, (n - 1) // 2 + 1, False, c.kinds.get(0) == "float").exprs[0]
    if c.kinds.get(0) != "float":
        return middle
    middle = c.line(middle, "middle")
    at = c.line(f"equal({x}, {middle})", "at")
    ties = c.line(f"maximum({at}, not_equal({x}, {x}))", "ties")
    low = operand(float("-inf"))
    split = f"max(where({at}, {x}, {low}), ties='split')"
    return f"where(greater({middle}, {low}), {split}, sum(where({ties}, {x}, 0.0)) / sum({ties}))"


# ================================================================ scatters
def written(c, at: int = 3) -> str:
    """scatter's src, cut to the index's shape: torch reads only that corner of a larger src (and
    its backward refuses to give such a src a gradient; gradflow gives the corner its own)."""
    src, shape, index = c.args[at], list(c.shapes[at]), list(c.shapes[2])
    if shape == index:
        return src
    return src + "[" + ", ".join(f":{i}" if n > i else ":" for n, i in zip(shape, index)) + "]"


def number(c, value) -> str:
    """A number to write into the output: a 0-d integer tensor for an integer one."""
    if c.kind != "int":
        return operand(float(value))
    if value != int(value):
        raise Unsupported("of a fractional number into an integer tensor")
    return integer(int(value)) if value >= 0 else f"-{integer(-int(value))}"


def scatter(c):
    """x.scatter(dim, index, src or value): of repeated indices the last along dim is written, as
    torch's CPU kernel does (torch leaves it undefined); reduce="add" is scatter_add."""
    if not c.ndim():
        raise Unsupported("of a 0-d tensor")
    x, d = c.args[0], c.args[1] % c.ndim()
    src = written(c) if c.overload in ("src", "reduce") else number(c, c.args[3])
    reduce = c.arg(4, "reduce")
    if reduce not in (None, "add"):
        raise Unsupported(f"with reduce={reduce!r}")
    return f"{'scatter_add' if reduce else 'scatter'}({x}, {c.args[2]}, {src}, axis={d})"


def scatter_add(c):
    if not c.ndim():
        raise Unsupported("of a 0-d tensor")
    return f"scatter_add({c.args[0]}, {c.args[2]}, {written(c)}, axis={c.args[1] % c.ndim()})"


def index_add(c):
    """x.index_add(dim, index, source, alpha=): source's entry i along dim added at index[i], the
    index spread over source's shape for scatter_add."""
    if not c.ndim():
        raise Unsupported("of a 0-d tensor")
    d, shape, alpha = c.args[1] % c.ndim(), list(c.shapes[3]), c.arg(4, "alpha", 1)
    lined = [1] * len(shape)
    lined[d] = shape[d]
    index = f"broadcast_to(reshape({c.args[2]}, {shape_text(lined)}), {text(tuple(shape))})"
    source = c.args[3] if alpha == 1 else f"{c.args[3]} * {text(alpha)}"
    return f"scatter_add({c.args[0]}, {index}, {source}, axis={d})"


def reduced(c, x: str, d: int, index: str, src: str, reduce: str, own: bool) -> str:
    """src reduced into x at index along d: "amax", "amin" and "prod" by gradflow's scatter_reduce;
    "sum" and "mean" (the mean of what is written, x's own entry counted where ``own``) by
    scatter_add of src into x, or into x with the written places set to 0 first."""
    if reduce in ("amax", "amin", "prod"):
        return f"scatter_reduce({x}, {index}, {src}, axis={d}, reduce={reduce!r}, include_self={own})"
    if reduce not in ("sum", "mean"):
        raise Unsupported(f"with reduce={reduce!r}")
    if reduce == "mean" and c.kind != "float":
        raise Unsupported("with reduce=\"mean\" of an integer tensor (torch rounds it down)")
    def added(start: str, zero: str, values: str) -> str:   # values added into start, its written places 0 first
        start = start if own else f"scatter({start}, {index}, {zero}, axis={d})"
        return f"scatter_add({start}, {index}, {values}, axis={d})"
    total = added(x, number(c, 0), src)
    if reduce == "sum":
        return total
    return f"{total} / {added(f'broadcast_to(1.0, {text(tuple(c.shape))})', '0.0', '1.0')}"


def scatter_reduce(c):
    """x.scatter_reduce(dim, index, src, reduce, include_self=): every reduction torch has."""
    if not c.ndim():
        raise Unsupported("of a 0-d tensor")
    if c.args[4] == "prod" and c.shapes[3] != c.shapes[2]:
        raise Unsupported("with reduce=\"prod\" and a src larger than the index (torch's gradient gives the "
                          "src entries it does not read numbers of their own): pass src cut to the index's shape")
    own = bool(c.kwargs.get("include_self", True))
    return reduced(c, c.args[0], c.args[1] % c.ndim(), c.args[2], written(c), c.args[4], own)


def index_reduce(c):
    """x.index_reduce(dim, index, source, reduce, include_self=): source's entry i along dim reduced
    into x's entry index[i], the index spread over source's shape for scatter_reduce; torch's
    gradients are scatter_reduce's."""
    if not c.ndim():
        raise Unsupported("of a 0-d tensor")
    d, shape = c.args[1] % c.ndim(), list(c.shapes[3])
    if c.shapes[2] != (shape[d],):
        raise Unsupported(f"with {math.prod(c.shapes[2])} indices for a source of {shape[d]} along dim {d} "
                          "(torch raises)")
    lined = [1] * len(shape)
    lined[d] = shape[d]
    index = c.line(f"broadcast_to(reshape({c.args[2]}, {shape_text(lined)}), {text(tuple(shape))})", "index")
    return reduced(c, c.args[0], d, index, c.args[3], c.args[4], bool(c.kwargs.get("include_self", True)))


SCAN_OPS: dict = {
    "cumsum": scan("cumsum"), "diff": diff, "cumprod": scan("cumprod"), "logcumsumexp": logcumsumexp,
    "cummax": running("cumargmax"), "cummin": running("cumargmin"),
    "sort": sort, "argsort": argsort, "msort": msort, "topk": topk, "kthvalue": kthvalue, "median": median,
    "scatter": scatter, "scatter_add": scatter_add, "index_add": index_add, "scatter_reduce": scatter_reduce,
    "index_reduce": index_reduce,
    "erf": lambda c: f"erf({c.args[0]})", "erfc": lambda c: f"erfc({c.args[0]})",
    "special_erf": lambda c: f"erf({c.args[0]})", "special_erfc": lambda c: f"erfc({c.args[0]})",   # torch.special's
}
