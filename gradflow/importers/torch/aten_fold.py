"""aten's col2im (F.fold) -> gradflow expressions: the sliding blocks of F.unfold's layout put back
in place, overlapping entries added up.

Each kernel offset's block [N, C, oh, ow] is spread out by the stride (zeros between its entries),
padded with zeros into the padded image at the offset's place, and the blocks are added in
torch's order (the kernel's offsets row by row, each entry of the image summed from 0 as torch's
col2im adds them), then the padding is cut off. Its gradient is F.unfold of the gradient: the
same slices, as torch's. (F.unfold, im2col, is in aten_image.)
"""

from __future__ import annotations

import itertools

from gradflow.importers.torch.aten_conv import per_axis, spread
from gradflow.importers.torch.aten_layout import padded
from gradflow.importers.torch.call import Unsupported, shape_text

CHUNK = 6000   # characters of a sum on one line (an expression holds 10,000): longer ones go on in the next


def placed(block: str, size: list, offset: tuple, stride: tuple, image: list) -> str:
    """One kernel offset's block [N, C, oh, ow], its entries stride apart, in the zeros of image
    [N, C, H', W'] from offset on."""
    for axis, s in zip((2, 3), stride):
        block, size = spread(block, size, axis, s)
    after = [whole - at - n for whole, at, n in zip(image[2:], offset, size[2:])]
    return padded(block, size, (offset[1], after[1], offset[0], after[0]), "0.0")


def col2im(c):
    (h, w), kernel, dilation, padding, stride = (per_axis(v, 2, 0) for v in c.args[1:6])
    shape, (kh, kw) = list(c.shapes[0]), kernel
    if kh * kw == 0 or shape[-2] % (kh * kw):
        raise Unsupported(f"of {shape_text(shape)}: its channels are not a multiple of the kernel's {kh * kw} entries")
    blocks_at = [(n + 2 * p - d * (k - 1) - 1) // s + 1 for n, p, d, k, s in zip((h, w), padding, dilation, kernel,
                                                                                  stride)]
    if min(blocks_at) <= 0 or blocks_at[0] * blocks_at[1] != shape[-1]:
        raise Unsupported(f"of {shape[-1]} blocks into {shape_text([h, w])} (the kernel, padding and stride make "
                          f"{max(blocks_at[0], 0) * max(blocks_at[1], 0)})")
    n, channels = (shape[0] if len(shape) == 3 else 1), shape[-2] // (kh * kw)
    blocks = c.line(f"reshape({c.args[0]}, {shape_text([n, channels, kh * kw] + blocks_at)})", "blocks")
    image = [n, channels, h + 2 * padding[0], w + 2 * padding[1]]
    total = ""
    for i, j in itertools.product(range(kh), range(kw)):
        term = placed(f"{blocks}[:, :, {i * kw + j}]", [n, channels] + blocks_at, (i * dilation[0], j * dilation[1]),
                      stride, image)
        if len(total) > CHUNK:
            total = c.line(total, f"sum{i}_{j}")
        total = f"{total} + {term}" if total else term
    cropped = f"({total})[:, :, {padding[0]}:{padding[0] + h}, {padding[1]}:{padding[1] + w}]"
    return cropped if len(shape) == 3 else f"reshape({cropped}, {shape_text(c.shape)})"


FOLD_OPS = {"col2im": col2im}
