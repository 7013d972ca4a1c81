"""aten convolutions and pools -> gradflow expressions: conv1d, conv2d and conv3d (groups, dilation,
string padding), their transposes, max and average pools in one, two and three dimensions (padding,
ceil_mode, count_include_pad), adaptive average pools.

gradflow has plain cross-correlations (NCHW, NCDHW) with symmetric padding and plain pooling windows;
everything else is laid out around them, so each value and gradient is torch's sum over the same
products. A 1-D op is its 2-D form on an added axis of size 1; groups are slices of the channels
convolved one by one and concatenated; a dilation (of the weight) or a transpose's stride (of the
input) is zeros inserted between the entries; a max pool's padding is -inf, never the maximum
(torch refuses a window of padding only), so ties go to the first entry in the window, as torch's.
"""

from __future__ import annotations

import itertools
import math

from gradflow.importers.torch.aten_layout import filled, padded
from gradflow.importers.torch.call import Unsupported, index_text, operand, shape_text, text


def spatial(nd: int) -> int:
    """The spatial axes of the gradflow op a torch op of nd is written with: 2, or 3 for 3-D."""
    return 3 if nd == 3 else 2


def per_axis(value, nd: int, h: int) -> tuple:
    """An int or a list of nd ints -> one per spatial axis of the gradflow op: (H, W), a 1-D op's H
    (of size 1) taking h, or (D, H, W)."""
    values = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    values = values * nd if len(values) == 1 else values
    return (h,) + values if nd == 1 else values


def full(shape, nd: int, batched: bool = True) -> list:
    """A shape as the gradflow op takes it: a 1-D op's added H axis of size 1, an unbatched
    convolution's N."""
    new = list(shape)
    if nd == 1:
        new.insert(len(new) - 1, 1)
    if batched and len(new) == spatial(nd) + 1:
        new.insert(0, 1)
    return new


def planar(x: str, shape, nd: int, batched: bool = True):
    """x as the gradflow op's text (pools: as many axes as its) and its shape."""
    new = full(shape, nd, batched)
    return (x if new == list(shape) else f"reshape({x}, {shape_text(new)})"), new


def back(c, expr: str, nd: int, batched: bool = True) -> str:
    """A result of the gradflow op in the call's own shape."""
    return expr if full(c.shape, nd, batched) == list(c.shape) else f"reshape({expr}, {shape_text(c.shape)})"


def spread(x: str, shape: list, axis: int, step: int):
    """x with step - 1 zeros after each entry along axis but the last (a dilated weight, a
    transposed convolution's strided input), and its shape."""
    if step == 1:
        return x, shape
    n, nd = shape[axis], len(shape)
    zeros = filled("0.0", shape[:axis + 1] + [step - 1] + shape[axis + 1:])
    joined = f"concat([expand_dims({x}, {axis + 1}), {zeros}], axis={axis + 1})"
    merged = f"reshape({joined}, {shape_text(shape[:axis] + [n * step] + shape[axis + 1:])})"
    size = (n - 1) * step + 1
    return merged + index_text(nd, axis, f":{size}"), shape[:axis] + [size] + shape[axis + 1:]


def widths(pads) -> tuple:
    """(before, after) per spatial axis, the first first -> F.pad's widths, the last axis first."""
    return tuple(n for pad in reversed(pads) for n in pad)


def convolved(c, x: str, xs: list, w: str, ws: list, stride, pads, dilation, groups: int) -> str:
    """The cross-correlation of x [N, C, *spatial] with w [O, C / groups, *kernel], pads one
    (before, after) per spatial axis (zeros), dilation the gaps between the weight's taps."""
    k = len(stride)
    for axis, d in enumerate(dilation, 2):
        w, ws = spread(w, ws, axis, d)
    symmetric = all(lo == hi >= 0 for lo, hi in pads)
    if not symmetric:
        x = padded(x, xs, widths(pads), "0.0")
    padding = text(tuple(lo for lo, _ in pads)) if symmetric else text((0,) * k)
    op = f"conv{k}d"
    if groups == 1:
        return f"{op}({x}, {w}, stride={text(tuple(stride))}, padding={padding})"
    if "(" in x:   # each group reads it: laid out once, on a line of its own
        x = c.line(x, "in")
    if "(" in w:
        w = c.line(w, "kernel")
    cin, cout = xs[1] // groups, ws[0] // groups
    parts = [f"{op}({x}[:, {g * cin}:{(g + 1) * cin}], {w}[{g * cout}:{(g + 1) * cout}], "
             f"stride={text(tuple(stride))}, padding={padding})" for g in range(groups)]
    return f"concat([{', '.join(parts)}], axis=1)"


def biased(expr: str, b, channels: int, k: int) -> str:
    return expr if b is None else f"{expr} + reshape({b}, {shape_text([channels] + [1] * k)})"


def conv_pads(padding, ws: list, nd: int, dilation) -> tuple:
    """(before, after) per spatial axis; 'same' puts an odd total's extra one after, as torch."""
    if padding == "valid":
        return ((0, 0),) * spatial(nd)
    if padding == "same":
        totals = [d * (k - 1) for d, k in zip(dilation, ws[2:])]
        return tuple((t // 2, t - t // 2) for t in totals)
    if isinstance(padding, str):
        raise Unsupported(f"with padding={padding!r}")
    return tuple((p, p) for p in per_axis(padding, nd, 0))


def conv(nd: int):
    def handler(c):
        x, xs = planar(c.args[0], c.shapes[0], nd)
        w, ws = planar(c.args[1], c.shapes[1], nd, batched=False)
        stride, dilation = per_axis(c.arg(3, "stride", 1), nd, 1), per_axis(c.arg(5, "dilation", 1), nd, 1)
        pads = conv_pads(c.arg(4, "padding", 0), ws, nd, dilation)
        expr = convolved(c, x, xs, w, ws, stride, pads, dilation, c.arg(6, "groups", 1))
        return back(c, biased(expr, c.arg(2, "bias"), ws[0], spatial(nd)), nd)
    return handler


def conv_transpose(nd: int):
    """The input spread by stride, padded by dilation (k - 1) - padding (output_padding more
    after), convolved with the weight flipped and its in and out axes swapped, group by group."""
    def handler(c):
        x, xs = planar(c.args[0], c.shapes[0], nd)
        w, ws = planar(c.args[1], c.shapes[1], nd, batched=False)      # [C, O / groups, *kernel]
        stride, padding = per_axis(c.arg(3, "stride", 1), nd, 1), per_axis(c.arg(4, "padding", 0), nd, 0)
        extra, groups = per_axis(c.arg(5, "output_padding", 0), nd, 0), c.arg(6, "groups", 1)
        dilation, k = per_axis(c.arg(7, "dilation", 1), nd, 1), spatial(nd)
        for axis, s in enumerate(stride, 2):
            x, xs = spread(x, xs, axis, s)
        pads = tuple((d * (n - 1) - p, d * (n - 1) - p + e) for d, n, p, e in zip(dilation, ws[2:], padding, extra))
        cin, cout, kernel, rest = ws[0] // groups, ws[1], ws[2:], tuple(range(2, k + 2))
        swapped = f"transpose({w}, axes={text((1, 0) + rest)})" if groups == 1 else \
            f"reshape(transpose(reshape({w}, {shape_text([groups, cin, cout] + kernel)}), " \
            f"axes={text((0, 2, 1) + tuple(a + 1 for a in rest))}), {shape_text([groups * cout, cin] + kernel)})"
        flipped = f"{swapped}[:, :{', ::-1' * k}]"
        expr = convolved(c, x, xs, flipped, [groups * cout, cin] + kernel, (1,) * k, pads, dilation, groups)
        return back(c, biased(expr, c.arg(2, "bias"), groups * cout, k), nd)
    return handler


def pool_pads(c, nd: int, xs: list, kernel, stride, padding) -> tuple:
    """(padding, after) per axis: after as many as the last window (of torch's output size:
    ceil_mode's last window is dropped when it would start in the padding) reaches beyond."""
    k = spatial(nd)
    out = full(c.shape, nd, False)[-k:]
    return tuple((p, max((o - 1) * s + w - n - p, 0)) for n, o, w, s, p in zip(xs[-k:], out, kernel, stride, padding))


def pool_args(c, nd: int):
    x, xs = planar(c.args[0], c.shapes[0], nd, batched=False)
    kernel = per_axis(c.args[1], nd, 1)
    stride = per_axis(c.arg(2, "stride") or c.args[1], nd, 1)
    return x, xs, kernel, stride, per_axis(c.arg(3, "padding", 0), nd, 0)


def max_pool(nd: int):
    """A dilated pool (taps d apart) is the max over its taps, each a strided slice, stacked last:
    the gradient goes to the first maximal tap in the window's row-major order, as torch's."""
    def handler(c):
        x, xs, kernel, stride, padding = pool_args(c, nd)
        dilation, k = per_axis(c.arg(4, "dilation", 1), nd, 1), spatial(nd)
        spans = tuple(d * (n - 1) + 1 for d, n in zip(dilation, kernel))
        pads = pool_pads(c, nd, xs, spans, stride, padding)
        if any(lo or hi for lo, hi in pads):
            x = padded(x, xs, widths(pads), operand(float("-inf")))
        if set(dilation) == {1}:
            return back(c, f"max_pool{k}d({x}, {text(kernel)}, {text(stride)})", nd, False)
        x = c.line(x, "input") if x != c.args[0] else x
        out = full(c.shape, nd, False)[-k:]
        taps = [x + "[..., " + ", ".join(f"{i * d}:{i * d + (o - 1) * s + 1}:{s}" for i, d, o, s in
                                         zip(offset, dilation, out, stride)) + "]"
                for offset in itertools.product(*map(range, kernel))]
        return back(c, f"max(stack([{', '.join(taps)}], axis=-1), axis=-1)", nd, False)
    return handler


def avg_pool(nd: int):
    """The mean of the zero-padded windows, rescaled where torch divides by another count:
    divisor_override; the entries in the input (count_include_pad=False); the entries in the
    input and its padding, fewer than the window's when ceil_mode's last one overhangs it."""
    def handler(c):
        x, xs, kernel, stride, padding = pool_args(c, nd)
        include, divisor = c.arg(5, "count_include_pad", True), c.arg(6, "divisor_override")
        pads, k = pool_pads(c, nd, xs, kernel, stride, padding), spatial(nd)
        if any(lo or hi for lo, hi in pads):
            x = padded(x, xs, widths(pads), "0.0")
        expr = f"avg_pool{k}d({x}, {text(kernel)}, {text(stride)})"
        if divisor is not None:
            expr = f"{expr} * {math.prod(kernel) / divisor!r}"   # the window's sum over divisor_override
        elif not include or any(hi > p for p, hi in pads):
            if include:   # the counted entries: the input and its padding, not ceil_mode's overhang
                inside = [n + 2 * p for n, p in zip(xs[-k:], padding)]
                mask = padded(filled("1.0", inside), inside, widths(tuple((0, hi - p) for p, hi in pads)), "0.0")
            else:
                mask = padded(filled("1.0", xs[-k:]), xs[-k:], widths(pads), "0.0")
            expr = f"{expr} / avg_pool{k}d({mask}, {text(kernel)}, {text(stride)})"
        return back(c, expr, nd, False)
    return handler


def adaptive_axis(x: str, ndim: int, axis: int, n: int, size: int) -> str:
    """The means over torch's adaptive windows along axis: [floor(i n / size), ceil((i + 1) n / size))."""
    parts = [f"mean({x}{index_text(ndim, axis, f'{i * n // size}:{-(-(i + 1) * n // size)}')}, axis={axis}, "
             f"keepdims=True)" for i in range(size)]
    return f"concat([{', '.join(parts)}], axis={axis})"


def adaptive_avg(nd: int):
    def handler(c):
        x, xs = planar(c.args[0], c.shapes[0], nd, batched=False)
        k = spatial(nd)
        size, sizes, ndim = per_axis(c.args[1], nd, 1), xs[-k:], len(xs)
        if set(size) == {1}:
            return back(c, f"mean({x}, axis={text(tuple(range(ndim - k, ndim)))}, keepdims=True)", nd, False)
        if all(n % m == 0 for n, m in zip(sizes, size)):
            kernel = tuple(n // m for n, m in zip(sizes, size))
            return back(c, f"avg_pool{k}d({x}, {text(kernel)}, {text(kernel)})", nd, False)
        done = None   # the axes pooled so far, on a line the next axis reads
        for axis, n, m in zip(range(ndim - k, ndim), sizes, size):
            if n != m:
                x = adaptive_axis(c.line(x, done) if done else x, ndim, axis, n, m)
                done = "rows" if axis == ndim - 2 else "planes"
        return back(c, x, nd, False)
    return handler


CONV_OPS = {
    **{f"conv{nd}d": conv(nd) for nd in (1, 2, 3)}, **{f"conv_transpose{nd}d": conv_transpose(nd) for nd in (1, 2, 3)},
    **{f"max_pool{nd}d": max_pool(nd) for nd in (1, 2, 3)}, **{f"avg_pool{nd}d": avg_pool(nd) for nd in (1, 2, 3)},
    **{f"adaptive_avg_pool{nd}d": adaptive_avg(nd) for nd in (1, 2, 3)},
}
