"""aten image ops -> gradflow expressions: upsampling (nearest, nearest-exact, linear, bilinear,
trilinear), pixel_shuffle / pixel_unshuffle, unfold (im2col), adaptive max pooling that divides,
instance_norm, embedding_bag and cdist.

Upsampling works one spatial axis at a time. Which input entries each output entry reads, and
with what weights, torch decides from the sizes alone, so they are worked out here as torch's
kernels do for float64 (linear's source positions floored in float32, as torch's)
and written as constants: an integer index list is where each row of ``equal(positions,
arange)`` is 1, gathered with ``take``, so that repeated entries add up their gradients as
torch's backward does. A plain stride or an integer repeat is a slice or a broadcast instead.
"""

from __future__ import annotations

import math

import numpy as np

from gradflow.importers.torch.aten_conv import per_axis
from gradflow.importers.torch.aten_index import integer
from gradflow.importers.torch.aten_layout import interleaved, padded
from gradflow.importers.torch.aten_nn import affine, batch_norm, normalized
from gradflow.importers.torch.call import Parts, Unsupported, index_text, shape_text, text

LITERAL_CHARS = 8000   # a constant longer than this is written in pieces (an expression holds 10,000)


def literal(v) -> str:
    v = float(v)
    return str(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)


def vector_line(c, values, suffix: str) -> str:
    """A line holding a constant float vector (a stack of literals, in pieces if long); its name."""
    pieces, piece, size = [], [], 0
    for item in map(literal, values):
        if piece and size + len(item) > LITERAL_CHARS:
            pieces.append(piece)
            piece, size = [], 0
        piece.append(item)
        size += len(item) + 2
    pieces.append(piece)
    if len(pieces) == 1:
        return c.line(f"stack([{', '.join(piece)}])", suffix)
    names = [c.line(f"stack([{', '.join(p)}])", f"{suffix}{k}") for k, p in enumerate(pieces)]
    return c.line(f"concat([{', '.join(names)}])", suffix)


def positions(c, index: list, n: int, suffix: str) -> str:
    """A line holding the integer vector ``index`` (entries below n): where each row of
    equal(index as a column, 0..n-1) is 1."""
    column = f"reshape({vector_line(c, index, suffix + '_at')}, [{len(index)}, 1])"
    return c.line(f"argmax(equal({column}, {vector_line(c, range(n), suffix + '_of')}), axis=1)", suffix)


def gathered(c, x: str, shape: list, d: int, index: list, suffix: str) -> str:
    """x's entries at ``index`` along axis d: a slice when they step evenly, a broadcast when
    each entry repeats k times in order, else ``take`` of a constant index list."""
    nd, n, m = len(shape), shape[d], len(index)
    if index == list(range(n)):
        return x
    step = index[1] - index[0] if m > 1 else 1
    if step >= 1 and index == list(range(index[0], index[0] + step * m, step)):
        return x + index_text(nd, d, f"{index[0]}:{index[-1] + 1}" + (f":{step}" if step > 1 else ""))
    k = m // n if n else 0
    if k > 1 and m == n * k and index == [j // k for j in range(m)]:
        return interleaved(x, shape, d, k)
    return f"take({x}, {positions(c, index, n, suffix)}, axis={d})"


# -- where torch's kernels read ---------------------------------------------------------------
def nearest_index(n: int, m: int, scale, exact: bool) -> list:
    """The source of each of m outputs from n inputs: floor(j * scale) (exact: floor((j + 0.5) *
    scale)), at most n - 1, scale being 1 / the given factor, else n / m: in double, floored in
    float32, as torch's kernel for the float64 tensors gradflow computes with."""
    s = 1.0 / scale if scale is not None and scale > 0 else n / m
    return [min(int(np.floor(np.float32((j + 0.5 if exact else j) * s))), n - 1) for j in range(m)]


def linear_index(n: int, m: int, align: bool, scale):
    """Each output's two sources and weights, as compute_source_index_and_lambda: the source
    position in double (not below 0 without align_corners), floored in float32."""
    if m == n:
        return list(range(m)), list(range(m)), [1.0] * m, [0.0] * m
    if align:
        ratio = (n - 1) / (m - 1) if m > 1 else 0.0
    else:
        ratio = 1.0 / scale if scale is not None and scale > 0 else n / m
    first, second, w0, w1 = [], [], [], []
    for j in range(m):
        src = ratio * j if align else max(ratio * (j + 0.5) - 0.5, 0.0)
        i = min(int(np.floor(np.float32(src))), n - 1)
        lam = min(max(src - i, 0.0), 1.0)
        first.append(i)
        second.append(i + (1 if i < n - 1 else 0))
        w0.append(1.0 - lam)
        w1.append(lam)
    return first, second, w0, w1


# -- upsampling -------------------------------------------------------------------------------
SCALE_NAMES = {1: ("scales",), 2: ("scales_h", "scales_w"), 3: ("scales_d", "scales_h", "scales_w")}


def scales_of(c, k: int, at: int) -> list:
    """The scale factor torch's kernel is given for each of the k spatial axes (None: in / out)."""
    if c.overload == "vec":
        given = c.arg(at, "scale_factors")
        return list(given) if given else [None] * k
    return [c.arg(at + i, name) for i, name in enumerate(SCALE_NAMES[k])]


def nearest(k: int, exact: bool):
    def handler(c):
        x, shape = c.args[0], list(c.shapes[0])
        scales = scales_of(c, k, 2)
        for i, scale in enumerate(scales):
            d = len(shape) - k + i
            n, m = shape[d], c.shape[d]
            x = gathered(c, x, shape, d, nearest_index(n, m, scale, exact), f"src{i}")
            shape[d] = m
            if i < k - 1 and x != c.args[0]:
                x = c.line(x, f"axis{i}")
        return x
    return handler


def linear(k: int):
    def handler(c):
        x, shape, align = c.args[0], list(c.shapes[0]), bool(c.arg(2, "align_corners", False))
        for i, scale in enumerate(scales_of(c, k, 3)):
            d = len(shape) - k + i
            n, m = shape[d], c.shape[d]
            first, second, w0, w1 = linear_index(n, m, align, scale)
            lined = shape_text([m] + [1] * (len(shape) - d - 1))
            terms = [f"{gathered(c, x, shape, d, index, f'src{i}_{t}')} * reshape({vector_line(c, w, f'weight{i}_{t}')}, {lined})"
                     for t, (index, w) in enumerate(((first, w0), (second, w1)))]
            x = " + ".join(terms)
            shape[d] = m
            if i < k - 1:
                x = c.line(x, f"axis{i}")
        return x
    return handler


# -- layout -----------------------------------------------------------------------------------
def regrouped(c, split: list, order: tuple) -> str:
    """x's last three axes split as ``split``, reordered as ``order``, merged in the output's shape."""
    p = c.ndim() - 3
    parts = f"reshape({c.args[0]}, {shape_text(list(c.shapes[0][:p]) + split)})"
    axes = tuple(range(p)) + tuple(p + a for a in order)
    return f"reshape(transpose({parts}, axes={text(axes)}), {shape_text(c.shape)})"


def pixel_shuffle(c):
    """[..., C r r, H, W] -> [..., C, H r, W r]: channel (c, i, j) lands at (h r + i, w r + j)."""
    r, (ch, h, w) = c.args[1], c.shapes[0][-3:]
    return regrouped(c, [ch // (r * r), r, r, h, w], (0, 3, 1, 4, 2))


def pixel_unshuffle(c):
    """[..., C, H r, W r] -> [..., C r r, H, W], pixel_shuffle undone."""
    r, (ch, h, w) = c.args[1], c.shapes[0][-3:]
    return regrouped(c, [ch, h // r, r, w // r, r], (0, 2, 4, 1, 3))


def im2col(c):
    """F.unfold: each kernel offset's strided slice of the zero-padded input, stacked after the
    channels: [N, C, kh kw, oh, ow] read as [N, C kh kw, oh ow]."""
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = (per_axis(v, 2, 0) for v in c.args[1:5])
    shape = list(c.shapes[0])
    x = padded(c.args[0], shape, (pw, pw, ph, ph), "0.0") if ph or pw else c.args[0]
    h, w = shape[-2] + 2 * ph, shape[-1] + 2 * pw
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise Unsupported("with a kernel larger than the padded input")
    if ph or pw:
        x = c.line(x, "padded")
    slices = [f"{x}[..., {i * dh}:{i * dh + (oh - 1) * sh + 1}:{sh}, {j * dw}:{j * dw + (ow - 1) * sw + 1}:{sw}]"
              for i in range(kh) for j in range(kw)]
    return f"reshape(stack([{', '.join(slices)}], axis=-3), {shape_text(c.shape)})"


# -- pooling, norms, bags, distances ----------------------------------------------------------
def adaptive_max(k: int):
    """Windows of in / out when the sizes divide: max_pool2d, or the last axis cut into windows;
    the indices are where in each input plane the window's first maximum is, as torch's."""
    def handler(c):
        size, shape, x = list(c.args[1]), list(c.shapes[0]), c.args[0]
        if any(n % m for n, m in zip(shape[-k:], size)):
            raise Unsupported("to a size that does not divide the input")
        kernel = [n // m for n, m in zip(shape[-k:], size)]
        windows = windowed(x, shape, size, kernel)
        if k == 2:
            values = f"max_pool2d({x}, {text(tuple(kernel))}, {text(tuple(kernel))})"
        else:   # read twice, by max and argmax
            windows = c.line(windows, "windows")
            values = f"max({windows}, axis=-1)"
        return Parts([values, window_index(c, f"argmax({windows}, axis=-1)", shape, size, kernel)])
    return handler


def windowed(x: str, shape: list, size: list, kernel: list) -> str:
    """x [..., *spatial] as [..., *size, the window's entries in order]."""
    pre, k = shape[:-len(size)], len(size)
    split = pre + [v for m, n in zip(size, kernel) for v in (m, n)]
    order = tuple(range(len(pre))) + tuple(len(pre) + 2 * i for i in range(k)) + \
        tuple(len(pre) + 2 * i + 1 for i in range(k))
    return f"reshape(transpose(reshape({x}, {shape_text(split)}), axes={text(order)}), " \
           f"{shape_text(pre + size + [math.prod(kernel)])})"


def window_index(c, local: str, shape: list, size: list, kernel: list) -> str:
    """The flat input index of each window's entry ``local``: the window's corner plus the
    entry's offset, in integers (gradflow's literals are floats)."""
    if len(size) == 1:
        corner = f"{positions(c, list(range(size[0])), size[0], 'window')} * {integer(kernel[0])}"
        return f"{corner} + {local}"
    (oh, ow), (kh, kw), w = size, kernel, shape[-1]
    rows = f"reshape({positions(c, list(range(oh)), oh, 'row')}, [{oh}, 1]) * {integer(kh * w)}"
    corner = f"{rows} + {positions(c, list(range(ow)), ow, 'col')} * {integer(kw)}"
    local = c.line(local, "local")
    down = f"take({positions(c, [a // kw for a in range(kh * kw)], kh, 'down')}, {local})"
    across = f"take({positions(c, [a % kw for a in range(kh * kw)], kw, 'across')}, {local})"
    return f"{corner} + {down} * {integer(w)} + {across}"


def instance_norm(c):
    """Each (sample, channel) normalised over its own positions (biased variance), or by the
    running statistics when use_input_stats is False: batch_norm's eval form, its arguments in
    the same places."""
    x, w, b, mean, _, use_input, _, eps = (c.args + [None] * 9)[:8]
    if not use_input and mean is not None:
        return batch_norm(c)
    s = shape_text([c.shapes[0][1]] + [1] * (c.ndim() - 2))
    return affine(normalized(x, tuple(range(2, c.ndim())), eps), w, b, s)


def embedding_bag(c):
    """Each bag's rows summed (or averaged) with where over a bag-by-index membership, so an
    infinite row adds only to its own bag: index l is in bag b when start_b <= l < start_{b+1}."""
    weight, idx, offsets = c.args[:3]
    mode, per_sample = c.arg(4, "mode", 0), c.arg(6, "per_sample_weights")
    last, pad = c.arg(7, "include_last_offset", False), c.arg(8, "padding_idx")
    if c.arg(3, "scale_grad_by_freq", False) or mode == 2:
        raise Unsupported("with scale_grad_by_freq or mode='max'")
    if c.ndim(1) != 1:
        raise Unsupported("of a 2-d input with offsets")
    n, bags = c.shapes[1][0], c.shapes[2][0] - (1 if last else 0)
    starts = f"{offsets}[:{bags}]"
    ends = f"{offsets}[1:]" if last else f"concat([{offsets}[1:], broadcast_to({float(n)!r}, (1,))])"
    at = vector_line(c, range(n), "at")
    member = f"less_equal(reshape({starts}, [{bags}, 1]), {at}) * less({at}, reshape({ends}, [{bags}, 1]))"
    if pad is not None and pad >= 0:
        member = f"{member} * not_equal({idx}, {float(pad)!r})"
    member = c.line(member, "member")
    rows = f"embedding({idx}, {weight})"
    if per_sample is not None:
        rows = f"{rows} * reshape({per_sample}, [{n}, 1])"
    total = f"sum(where(reshape({member}, [{bags}, {n}, 1]), {rows}, 0.0), axis=1)"
    if mode == 1:
        total = f"{total} / maximum(sum({member}, axis=1, keepdims=True), 1.0)"
    return Parts([total])


def cdist(c):
    """The 2-norm of each difference: its gradient is 0 at a zero distance, as torch's. Torch
    takes a matrix-product route above 25 rows, rounded otherwise; that one is refused."""
    p, mode = c.arg(2, "p", 2.0), c.arg(3, "compute_mode")
    if p != 2:
        raise Unsupported(f"with p={p!r} (only p=2)")
    rows = (c.shapes[0][-2], c.shapes[1][-2])
    if mode != 2 and (mode == 1 or max(rows) > 25):
        raise Unsupported("by a matrix product (torch's route above 25 rows, or compute_mode="
                          "'use_mm_for_euclid_dist'), whose rounding gradflow does not follow: pass "
                          "compute_mode='donot_use_mm_for_euclid_dist'")
    return f"norm(expand_dims({c.args[0]}, -2) - expand_dims({c.args[1]}, -3), axis=-1)"


def unfold(c):
    """x.unfold(dim, size, step): windows of ``size`` along dim, ``step`` apart, as a new last axis:
    the windows' entries gathered along dim (a slice when they do not overlap), then split."""
    if not c.ndim():
        raise Unsupported("of a 0-d tensor")
    d, size, step = c.args[1] % c.ndim(), c.args[2], c.args[3]
    shape = list(c.shapes[0])
    count = (shape[d] - size) // step + 1
    index = [w * step + k for w in range(count) for k in range(size)]
    windows = f"reshape({gathered(c, c.args[0], shape, d, index, 'windows')}, " \
              f"{shape_text(shape[:d] + [count, size] + shape[d + 1:])})"
    order = [a for a in range(c.ndim() + 1) if a != d + 1] + [d + 1]
    return windows if d + 1 == c.ndim() else f"transpose({windows}, axes={text(tuple(order))})"


IMAGE_OPS = {
    "upsample_nearest1d": nearest(1, False), "upsample_nearest2d": nearest(2, False),
    "upsample_nearest3d": nearest(3, False), "_upsample_nearest_exact1d": nearest(1, True),
    "_upsample_nearest_exact2d": nearest(2, True), "_upsample_nearest_exact3d": nearest(3, True),
    "upsample_linear1d": linear(1), "upsample_bilinear2d": linear(2), "upsample_trilinear3d": linear(3),
    "pixel_shuffle": pixel_shuffle, "pixel_unshuffle": pixel_unshuffle, "im2col": im2col,
    "adaptive_max_pool2d": adaptive_max(2), "adaptive_max_pool1d": adaptive_max(1),
    "instance_norm": instance_norm, "embedding_bag": embedding_bag, "cdist": cdist, "unfold": unfold,
}
