"""aten ops that lay a tensor out anew -> gradflow expressions: pad, flip, roll, repeat, tile,
repeat_interleave, movedim, narrow, new_zeros and kin, diag, diag_embed, tril / triu, outer,
meshgrid.

Each is slices, concat, reshape and broadcast_to of its input, so its gradient is torch's
(a repeated entry's gradients add up through broadcast_to's). A triangle's mask, which
gradflow has no literal for, is a step of ones and zeros laid out skewed: reshaped so that
each row starts one place later, entry (i, j) reads the step at j - i.
"""

from __future__ import annotations

import math

from gradflow.importers.torch.call import Alias, Parts, Unsupported, index_text, operand, shape_text, text


def filled(value, shape) -> str:
    return f"broadcast_to({value}, {text(tuple(shape))})"


def zero_of(kind: str) -> str:
    return "0" if kind == "int" else "0.0"


def fill_value(c, value) -> str:
    """A fill value in the output's kind: gradflow holds booleans as 0/1 floats."""
    if c.kind == "int":
        if value != int(value):
            raise Unsupported("of an integer tensor with a fractional value")
        return str(int(value))
    return operand(float(value))


def padded(x: str, shape: list, widths, fill: str, mode: str = "constant", line=None) -> str:
    """x padded as F.pad's widths say (last axis first, (before, after) each); a negative
    width crops (constant mode). The other modes read x up to three times along each axis:
    given ``line`` (``c.line``), each axis's result is a line the next one reads."""
    nd, shape = len(shape), list(shape)
    for k in range(len(widths) // 2):
        d, (lo, hi) = nd - 1 - k, widths[2 * k:2 * k + 2]
        if lo < 0 or hi < 0:
            if mode != "constant":
                raise Unsupported(f"with a negative width in mode={mode!r}")
            start, stop = max(-lo, 0), shape[d] + min(hi, 0)
            x, shape[d] = x + index_text(nd, d, f"{start}:{max(stop, start)}"), max(stop - start, 0)
            lo, hi = max(lo, 0), max(hi, 0)
        if lo or hi:
            parts = edges(x, shape, d, lo, hi, fill, mode)
            x, shape[d] = f"concat([{', '.join(parts)}], axis={d})", shape[d] + lo + hi
            if line is not None and mode != "constant" and any(widths[2 * k + 2:]):
                x = line(x, f"axis{d}")
    return x


def edges(x: str, shape: list, d: int, lo: int, hi: int, fill: str, mode: str) -> list:
    """[what goes before x along d, x, what goes after], each of lo / hi entries (none when 0)."""
    nd, n = len(shape), shape[d]

    def part(item, width):
        if mode == "replicate":
            return filled(x + index_text(nd, d, item), shape[:d] + [width] + shape[d + 1:])
        return x + index_text(nd, d, item)
    if mode == "constant":
        before, after = (filled(fill, shape[:d] + [w] + shape[d + 1:]) for w in (lo, hi))
    elif mode == "circular":
        before, after = part(f"{n - lo}:", lo), part(f":{hi}", hi)
    elif mode == "replicate":
        before, after = part("0:1", lo), part(f"{n - 1}:", hi)
    elif mode == "reflect":
        stop = n - 2 - hi
        before, after = part(f"{lo}:0:-1", lo), part(f"{n - 2}:{stop if stop >= 0 else ''}:-1", hi)
    else:
        raise Unsupported(f"with mode={mode!r}")
    return [p for p, w in ((before, lo), (x, 1), (after, hi)) if w]


def pad(c):
    mode = c.arg(2, "mode", "constant")
    value = c.arg(3, "value") if mode == "constant" else None
    return padded(c.args[0], c.shapes[0], c.args[1], fill_value(c, value or 0), mode, c.line)


def constant_pad_nd(c):
    return padded(c.args[0], c.shapes[0], c.args[1], fill_value(c, c.arg(2, "value", 0)))


def flip(c):
    dims = {d % c.ndim() for d in c.args[1]}
    if not dims:
        return Alias(c.args[0])
    return c.args[0] + "[" + ", ".join("::-1" if d in dims else ":" for d in range(max(dims) + 1)) + "]"


def rolled(x: str, shape: list, shift: int, d: int) -> str:
    n, nd = shape[d], len(shape)
    shift = shift % n if n else 0
    if not shift:
        return x
    return f"concat([{x}{index_text(nd, d, f'{n - shift}:')}, {x}{index_text(nd, d, f':{n - shift}')}], axis={d})"


def roll(c):
    x, shape, dims = c.args[0], list(c.shapes[0]), list(c.arg(2, "dims", []) or [])
    if not dims:   # the flattened tensor rolled, in its shape again
        flat = rolled(f"reshape({x}, [{math.prod(shape)}])", [math.prod(shape)], c.args[1][0], 0)
        return f"reshape({flat}, {shape_text(shape)})"
    for k, (shift, d) in enumerate(zip(c.args[1], dims)):
        if "(" in x:   # rolled reads x twice: the rolls so far once, on a line of their own
            x = c.line(x, f"rolled{k}")
        x = rolled(x, shape, shift, d % len(shape))
    return x


def repeat(c, reps=None):
    """Tensor.repeat: each axis of x (with leading axes of 1 for more repeats) repeated whole."""
    reps = list(c.args[1] if reps is None else reps)
    shape = [1] * (len(reps) - c.ndim()) + list(c.shapes[0])
    if len(reps) < c.ndim():
        raise Unsupported("with fewer repeats than axes")
    split, spread = [], []
    for r, n in zip(reps, shape):
        split += [1, n] if r != 1 else [n]
        spread += [r, n] if r != 1 else [n]
    return f"reshape(broadcast_to(reshape({c.args[0]}, {shape_text(split)}), {text(tuple(spread))}), " \
           f"{shape_text(c.shape)})"


def tile(c):
    return repeat(c, [1] * (c.ndim() - len(c.args[1])) + list(c.args[1]))


def repeat_interleave(c):
    """Each entry repeated ``repeats`` times in place, along dim (of the flattened x by default)."""
    if c.overload != "self_int":
        raise Unsupported("with a tensor of repeats (its output's size depends on their values)")
    dim, r = c.arg(2, "dim"), c.args[1]
    x, shape = c.args[0], list(c.shapes[0])
    if dim is None:
        x, shape, dim = f"reshape({x}, [{math.prod(shape)}])", [math.prod(shape)], 0
    return interleaved(x, shape, dim % len(shape), r)


def interleaved(x: str, shape: list, d: int, r: int) -> str:
    """x with each entry along axis d repeated r times in place: a new axis of 1 after d, broadcast
    to r, merged into d."""
    spread = shape[:d + 1] + [r] + shape[d + 1:]
    return f"reshape(broadcast_to(reshape({x}, {shape_text(shape[:d + 1] + [1] + shape[d + 1:])}), " \
           f"{text(tuple(spread))}), {shape_text(shape[:d] + [shape[d] * r] + shape[d + 1:])})"


def movedim(c):
    nd = c.ndim()
    source = [s % nd for s in (c.args[1] if isinstance(c.args[1], list) else [c.args[1]])]
    target = [d % nd for d in (c.args[2] if isinstance(c.args[2], list) else [c.args[2]])]
    order = [None] * nd
    for s, d in zip(source, target):
        order[d] = s
    rest = iter(k for k in range(nd) if k not in source)
    return f"transpose({c.args[0]}, axes={text(tuple(o if o is not None else next(rest) for o in order))})"


def narrow(c):
    dim, start, length = c.args[1] % c.ndim(), c.args[2], c.args[3]
    if not isinstance(start, int):
        raise Unsupported("with a tensor start")
    start = start + c.shapes[0][dim] if start < 0 else start
    return c.args[0] + index_text(c.ndim(), dim, f"{start}:{start + length}")


def new_filled(value):
    """x.new_zeros(size), new_ones, new_full(size, v): a constant of that size, x's kind or dtype's."""
    return lambda c: filled(fill_value(c, c.args[2] if value is None else value), c.args[1])


def on_diagonal(x: str, pre: list, n: int, k: int, zero: str) -> str:
    """[..., n] -> [..., n + |k|, n + |k|] with x on diagonal k, zeros elsewhere: x as a column
    beside n zeros, read n by n, lands on the main diagonal."""
    rows = f"concat([reshape({x}, {shape_text(pre + [n, 1])}), {filled(zero, pre + [n, n])}], axis=-1)"
    square = f"reshape(reshape({rows}, {shape_text(pre + [n * (n + 1)])})[..., :{n * n}], {shape_text(pre + [n, n])})"
    widths = (k, 0, 0, k) if k >= 0 else (0, -k, -k, 0)
    return padded(square, pre + [n, n], widths, zero) if k else square


def diag(c):
    k, x = c.arg(1, "diagonal", 0), c.args[0]
    if c.ndim() == 1:
        return on_diagonal(x, [], c.shapes[0][0], k, zero_of(c.kind))
    if c.ndim() != 2:
        raise Unsupported(f"of a {c.ndim()}-d tensor")
    return diagonal_of(x, [], *c.shapes[0], k)


def diagonal_of(x: str, pre: list, n: int, m: int, k: int) -> str:
    """Diagonal k of x's last two axes (n by m): those laid out flat, a strided slice of them."""
    start, length = (k, min(n, m - k)) if k >= 0 else (-k * m, min(n + k, m))
    if length <= 0:
        raise Unsupported("giving an empty diagonal")
    return f"reshape({x}, {shape_text(pre + [n * m])})[..., {start}:{start + (length - 1) * (m + 1) + 1}:{m + 1}]"


def diagonal(c):
    """x's diagonal ``offset`` over dim1 and dim2, as the last axis of what is left: those two
    axes moved last, then diag's."""
    nd, x, shape = c.ndim(), c.args[0], list(c.shapes[0])
    k, d1, d2 = c.arg(1, "offset", 0), c.arg(2, "dim1", 0) % nd, c.arg(3, "dim2", 1) % nd
    rest = [d for d in range(nd) if d not in (d1, d2)]
    if rest + [d1, d2] != list(range(nd)):
        x = f"transpose({x}, axes={text(tuple(rest + [d1, d2]))})"
    return diagonal_of(x, [shape[d] for d in rest], shape[d1], shape[d2], k)


def fill_diagonal(c):
    """x.fill_diagonal_(v) of a matrix: v where i == j, the lower and the upper triangle's band both."""
    if c.ndim() != 2 or c.arg(2, "wrap", False) and c.shapes[0][0] > c.shapes[0][1] + 1:
        raise Unsupported("but of a matrix, without wrap=True past its first square")
    n, m = c.shapes[0]
    return f"where({band(n, m, 0, True)} * {band(n, m, 0, False)}, {fill_value(c, c.args[1])}, {c.args[0]})"


def diag_embed(c):
    nd, k = c.ndim(), c.arg(1, "offset", 0)
    if (c.arg(2, "dim1", -2) % (nd + 1), c.arg(3, "dim2", -1) % (nd + 1)) != (nd - 1, nd):
        raise Unsupported("onto other axes than the last two")
    shape = list(c.shapes[0])
    return on_diagonal(c.args[0], shape[:-1], shape[-1], k, zero_of(c.kind))


def band(n: int, m: int, k: int, upper: bool) -> str:
    """[n, m] ones where j - i <= k (or >= k, upper), zeros elsewhere: row i of a step laid out
    n + m - 1 wide starts one place later than row i - 1, so (i, j) reads the step at j - i + n - 1."""
    wide, off = n + m, n - 1
    ones = min(max(k + off + (0 if upper else 1), 0), wide)   # where the step turns
    first, second = ("0.0", "1.0") if upper else ("1.0", "0.0")
    step = [filled(v, (w,)) for v, w in ((first, ones), (second, wide - ones)) if w]
    step = step[0] if len(step) == 1 else f"concat([{', '.join(step)}])"
    flat = f"reshape(broadcast_to({step}, {text((n, wide))}), [{n * wide}])[{off}:{off + n * (wide - 1)}]"
    return f"reshape({flat}, {shape_text([n, wide - 1])})[:, :{m}]"


def triangle(upper: bool):
    def handler(c):
        n, m = c.shapes[0][-2:]
        if not n * m:
            return Alias(c.args[0])
        return f"where({band(n, m, c.arg(1, 'diagonal', 0), upper)}, {c.args[0]}, {zero_of(c.kind)})"
    return handler


def meshgrid(c):
    """torch.meshgrid: each input (1-d, or 0-d as one entry) along its own axis of the grid, repeated
    along the others by broadcast_to, whose gradient adds up as torch's; indexing="xy" swaps the
    grid's first two axes, as torch."""
    names, shapes = c.args[0], [list(s) for s in c.shapes[0]]
    at = list(range(len(names)))
    if c.kwargs.get("indexing", "ij") == "xy" and len(names) > 1:
        at[:2] = 1, 0
    grid = [0] * len(names)
    for axis, shape in zip(at, shapes):
        grid[axis] = shape[0] if shape else 1
    out = []
    for name, shape, axis in zip(names, shapes, at):
        lined = [n if k == axis else 1 for k, n in enumerate(grid)]
        expr = name if shape == lined else f"reshape({name}, {shape_text(lined)})"
        out.append(filled(expr, grid) if lined != grid else Alias(name) if expr == name else expr)
    return Parts(out)


def outer(c):
    return f"reshape({c.args[0]}, [{c.shapes[0][0]}, 1]) * {c.args[1]}"


LAYOUT_OPS = {
    "pad": pad, "constant_pad_nd": constant_pad_nd, "flip": flip, "roll": roll,
    "repeat": repeat, "tile": tile, "repeat_interleave": repeat_interleave,
    "movedim": movedim, "moveaxis": movedim, "narrow": narrow,
    "new_zeros": new_filled(0), "new_ones": new_filled(1), "new_full": new_filled(None),
    "diag": diag, "diagonal": diagonal, "fill_diagonal": fill_diagonal, "diag_embed": diag_embed,
    "tril": triangle(False), "triu": triangle(True),
    "outer": outer, "ger": outer, "meshgrid": meshgrid,
}
