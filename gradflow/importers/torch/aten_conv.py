"""aten convolutions and pools -> gradflow expressions: conv1d and conv2d (groups, dilation, string
padding), their transposes, max and average pools in one and two dimensions (padding, ceil_mode,
count_include_pad), adaptive average pools.

gradflow has one plain NCHW cross-correlation with symmetric padding and plain pooling windows;
everything else is laid out around them, so each value and gradient is torch's sum over the same
products. A 1-D op is its 2-D form on an added axis of size 1; groups are slices of the channels
convolved one by one and concatenated; a dilation (of the weight) or a transpose's stride (of the
input) is zeros inserted between the entries; a max pool's padding is -inf, never the maximum
(torch refuses a window of padding only), so ties go to the first entry in the window, as torch's.
"""

from __future__ import annotations

from gradflow.importers.torch.aten_layout import filled, padded
from gradflow.importers.torch.call import Unsupported, index_text, operand, shape_text, text


def pair(value, nd: int, h: int) -> tuple:
    """An int or a list of nd ints -> its (H, W) pair, a 1-D op's H (of size 1) taking h."""
    values = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    values = values * nd if len(values) == 1 else values
    return values if nd == 2 else (h,) + values


def four(shape, nd: int, batched: bool = True) -> list:
    """A shape as 4-D: a 1-D op's added H axis of size 1, an unbatched convolution's N."""
    new = list(shape)
    if nd == 1:
        new.insert(len(new) - 1, 1)
    if batched and len(new) == 3:
        new.insert(0, 1)
    return new


def planar(x: str, shape, nd: int, batched: bool = True):
    """x as 4-D text (pools: as many axes as the 2-D op's) and its shape."""
    new = four(shape, nd, batched)
    return (x if new == list(shape) else f"reshape({x}, {shape_text(new)})"), new


def back(c, expr: str, nd: int, batched: bool = True) -> str:
    """A result of the 2-D form in the call's own shape."""
    return expr if four(c.shape, nd, batched) == list(c.shape) else f"reshape({expr}, {shape_text(c.shape)})"


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
    """(before, after) for H then W -> F.pad's widths, the last axis first."""
    return (*pads[1], *pads[0])


def convolved(c, x: str, xs: list, w: str, ws: list, stride, pads, dilation, groups: int) -> str:
    """The 4-D cross-correlation of x [N, C, H, W] with w [O, C / groups, kh, kw], pads one
    (before, after) per spatial axis (zeros), dilation the gaps between the weight's taps."""
    for axis, d in zip((2, 3), dilation):
        w, ws = spread(w, ws, axis, d)
    symmetric = all(lo == hi >= 0 for lo, hi in pads)
    if not symmetric:
        x = padded(x, xs, widths(pads), "0.0")
    padding = text(tuple(lo for lo, _ in pads)) if symmetric else "(0, 0)"
    if groups == 1:
        return f"conv2d({x}, {w}, stride={text(tuple(stride))}, padding={padding})"
    if "(" in x:   # each group reads it: laid out once, on a line of its own
        x = c.line(x, "in")
    if "(" in w:
        w = c.line(w, "kernel")
    cin, cout = xs[1] // groups, ws[0] // groups
    parts = [f"conv2d({x}[:, {g * cin}:{(g + 1) * cin}], {w}[{g * cout}:{(g + 1) * cout}], "
             f"stride={text(tuple(stride))}, padding={padding})" for g in range(groups)]
    return f"concat([{', '.join(parts)}], axis=1)"


def biased(expr: str, b, channels: int) -> str:
    return expr if b is None else f"{expr} + reshape({b}, [{channels}, 1, 1])"


def conv_pads(padding, ws: list, nd: int, dilation) -> tuple:
    """(before, after) per spatial axis; 'same' puts an odd total's extra one after, as torch."""
    if padding == "valid":
        return (0, 0), (0, 0)
    if padding == "same":
        totals = [d * (k - 1) for d, k in zip(dilation, ws[2:])]
        return tuple((t // 2, t - t // 2) for t in totals)
    if isinstance(padding, str):
        raise Unsupported(f"with padding={padding!r}")
    return tuple((p, p) for p in pair(padding, nd, 0))


def conv(nd: int):
    def handler(c):
        x, xs = planar(c.args[0], c.shapes[0], nd)
        w, ws = planar(c.args[1], c.shapes[1], nd, batched=False)
        stride, dilation = pair(c.arg(3, "stride", 1), nd, 1), pair(c.arg(5, "dilation", 1), nd, 1)
        pads = conv_pads(c.arg(4, "padding", 0), ws, nd, dilation)
        expr = convolved(c, x, xs, w, ws, stride, pads, dilation, c.arg(6, "groups", 1))
        return back(c, biased(expr, c.arg(2, "bias"), ws[0]), nd)
    return handler


def conv_transpose(nd: int):
    """The input spread by stride, padded by dilation (k - 1) - padding (output_padding more
    after), convolved with the weight flipped and its in and out axes swapped, group by group."""
    def handler(c):
        x, xs = planar(c.args[0], c.shapes[0], nd)
        w, ws = planar(c.args[1], c.shapes[1], nd, batched=False)      # [C, O / groups, kh, kw]
        stride, padding = pair(c.arg(3, "stride", 1), nd, 1), pair(c.arg(4, "padding", 0), nd, 0)
        extra, groups = pair(c.arg(5, "output_padding", 0), nd, 0), c.arg(6, "groups", 1)
        dilation = pair(c.arg(7, "dilation", 1), nd, 1)
        for axis, s in zip((2, 3), stride):
            x, xs = spread(x, xs, axis, s)
        pads = tuple((d * (k - 1) - p, d * (k - 1) - p + e) for d, k, p, e in zip(dilation, ws[2:], padding, extra))
        cin, cout, kh, kw = ws[0] // groups, ws[1], ws[2], ws[3]
        swapped = f"transpose({w}, axes=(1, 0, 2, 3))" if groups == 1 else \
            f"reshape(transpose(reshape({w}, [{groups}, {cin}, {cout}, {kh}, {kw}]), axes=(0, 2, 1, 3, 4)), " \
            f"[{groups * cout}, {cin}, {kh}, {kw}])"
        flipped = f"{swapped}[:, :, ::-1, ::-1]"
        expr = convolved(c, x, xs, flipped, [groups * cout, cin, kh, kw], (1, 1), pads, dilation, groups)
        return back(c, biased(expr, c.arg(2, "bias"), groups * cout), nd)
    return handler


def pool_pads(c, nd: int, xs: list, kernel, stride, padding) -> tuple:
    """(padding, after) per axis: after as many as the last window (of torch's output size:
    ceil_mode's last window is dropped when it would start in the padding) reaches beyond."""
    out = four(c.shape, nd, False)[-2:]
    return tuple((p, max((o - 1) * s + k - n - p, 0)) for n, o, k, s, p in zip(xs[-2:], out, kernel, stride, padding))


def pool_args(c, nd: int):
    x, xs = planar(c.args[0], c.shapes[0], nd, batched=False)
    kernel = pair(c.args[1], nd, 1)
    stride = pair(c.arg(2, "stride") or c.args[1], nd, 1)
    return x, xs, kernel, stride, pair(c.arg(3, "padding", 0), nd, 0)


def max_pool(nd: int):
    """A dilated pool (taps d apart) is the max over its taps, each a strided slice, stacked last:
    the gradient goes to the first maximal tap in the window's row-major order, as torch's."""
    def handler(c):
        x, xs, kernel, stride, padding = pool_args(c, nd)
        dilation = pair(c.arg(4, "dilation", 1), nd, 1)
        spans = tuple(d * (k - 1) + 1 for d, k in zip(dilation, kernel))
        pads = pool_pads(c, nd, xs, spans, stride, padding)
        if any(lo or hi for lo, hi in pads):
            x = padded(x, xs, widths(pads), operand(float("-inf")))
        if dilation == (1, 1):
            return back(c, f"max_pool2d({x}, {text(kernel)}, {text(stride)})", nd, False)
        x = c.line(x, "input") if x != c.args[0] else x
        (oh, ow), (sh, sw), (dh, dw) = four(c.shape, nd, False)[-2:], stride, dilation
        taps = [f"{x}[..., {i * dh}:{i * dh + (oh - 1) * sh + 1}:{sh}, {j * dw}:{j * dw + (ow - 1) * sw + 1}:{sw}]"
                for i in range(kernel[0]) for j in range(kernel[1])]
        return back(c, f"max(stack([{', '.join(taps)}], axis=-1), axis=-1)", nd, False)
    return handler


def avg_pool(nd: int):
    """The mean of the zero-padded windows, rescaled where torch divides by another count:
    divisor_override; the entries in the input (count_include_pad=False); the entries in the
    input and its padding, fewer than the window's when ceil_mode's last one overhangs it."""
    def handler(c):
        x, xs, kernel, stride, padding = pool_args(c, nd)
        include, divisor = c.arg(5, "count_include_pad", True), c.arg(6, "divisor_override")
        pads = pool_pads(c, nd, xs, kernel, stride, padding)
        if any(lo or hi for lo, hi in pads):
            x = padded(x, xs, widths(pads), "0.0")
        expr = f"avg_pool2d({x}, {text(kernel)}, {text(stride)})"
        if divisor is not None:
            expr = f"{expr} * {kernel[0] * kernel[1] / divisor!r}"   # the window's sum over divisor_override
        elif not include or any(hi > p for p, hi in pads):
            if include:   # the counted entries: the input and its padding, not ceil_mode's overhang
                inside = [xs[-2] + 2 * padding[0], xs[-1] + 2 * padding[1]]
                mask = padded(filled("1.0", inside), inside, widths(tuple((0, hi - p) for p, hi in pads)), "0.0")
            else:
                mask = padded(filled("1.0", xs[-2:]), xs[-2:], widths(pads), "0.0")
            expr = f"{expr} / avg_pool2d({mask}, {text(kernel)}, {text(stride)})"
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
        size, (h, w), ndim = pair(c.args[1], nd, 1), xs[-2:], len(xs)
        if size == (1, 1):
            return back(c, f"mean({x}, axis=({ndim - 2}, {ndim - 1}), keepdims=True)", nd, False)
        if h % size[0] == 0 and w % size[1] == 0:
            kernel = (h // size[0], w // size[1])
            return back(c, f"avg_pool2d({x}, {text(kernel)}, {text(kernel)})", nd, False)
        if h != size[0]:
            x = adaptive_axis(x, ndim, ndim - 2, h, size[0])
        if w != size[1]:
            x = adaptive_axis(c.line(x, "rows") if h != size[0] else x, ndim, ndim - 1, w, size[1])
        return back(c, x, nd, False)
    return handler


CONV_OPS = {
    "conv1d": conv(1), "conv2d": conv(2), "conv_transpose1d": conv_transpose(1), "conv_transpose2d": conv_transpose(2),
    "max_pool1d": max_pool(1), "max_pool2d": max_pool(2), "avg_pool1d": avg_pool(1), "avg_pool2d": avg_pool(2),
    "adaptive_avg_pool1d": adaptive_avg(1), "adaptive_avg_pool2d": adaptive_avg(2),
}
