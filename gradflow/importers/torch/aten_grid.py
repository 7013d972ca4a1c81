"""aten's spatial-transformer ops -> gradflow expressions: affine_grid_generator (F.affine_grid, 4-D
and 5-D) and grid_sampler (F.grid_sample: bilinear or nearest, any padding mode).

F.affine_grid is torch's own composition: a constant base grid of every output position's
normalised coordinates (x, y[, z], 1), made as torch makes it (linspace from -1 to 1, drawn in by
(n - 1) / n without align_corners), times theta transposed, so the gradient into theta is torch's
base^T @ the grid's gradient. grid_sample is gradflow's own op, which reads as torch's kernels do.
"""

from __future__ import annotations

import math
from fractions import Fraction

from gradflow.importers.torch.aten_image import vector_line
from gradflow.importers.torch.call import Unsupported, shape_text, text

MODES = {0: "bilinear", 1: "nearest", 2: "bicubic"}
PADDINGS = {0: "zeros", 1: "border", 2: "reflection"}


def linspace(n: int, align: bool) -> list:
    """torch's float64 linspace(-1, 1, n): the first half counted up from -1, the second down from 1,
    each product and sum rounded once (its kernel's fused multiply-add); times (n - 1) / n without
    align_corners; [0] for n = 1."""
    if n <= 1:
        return [0.0]
    step = Fraction(2.0 / (n - 1))
    values = [float(-1 + step * i if i < n // 2 else 1 - step * (n - 1 - i)) for i in range(n)]
    return values if align else [v * (n - 1) / n for v in values]


def affine_grid(c):
    """theta [N, 2, 3] with size [N, C, H, W] -> [N, H, W, 2]; theta [N, 3, 4] with [N, C, D, H, W]
    -> [N, D, H, W, 3]: the base grid [positions, k + 1] @ theta^T."""
    size, align = list(c.args[1]), bool(c.arg(2, "align_corners", False))
    spatial = size[2:]
    k = len(spatial)
    if k not in (2, 3):
        raise Unsupported(f"of size {shape_text(size)} (torch takes 4-D and 5-D sizes)")
    columns = []
    for a in range(k):   # x runs along the last axis, y the one before, z the first
        n = spatial[k - 1 - a]
        lined = [1] * k
        lined[k - 1 - a] = n
        axis = vector_line(c, linspace(n, align), "xyz"[a])
        columns.append(f"broadcast_to(reshape({axis}, {shape_text(lined)}), {text(tuple(spatial))})")
    columns.append(f"broadcast_to(1.0, {text(tuple(spatial))})")
    base = c.line(f"reshape(stack([{', '.join(columns)}], axis=-1), [{math.prod(spatial)}, {k + 1}])", "base")
    return f"reshape({base} @ transpose({c.args[0]}, axes=(0, 2, 1)), {shape_text(c.shape)})"


def grid_sampler(c):
    mode, padding, align = c.args[2], c.args[3], bool(c.arg(4, "align_corners", False))
    if MODES.get(mode) not in ("bilinear", "nearest"):
        raise Unsupported(f"with mode={MODES.get(mode, mode)!r} (gradflow samples \"bilinear\" and \"nearest\")")
    return f"grid_sample({c.args[0]}, {c.args[1]}, mode={MODES[mode]!r}, padding_mode={PADDINGS[padding]!r}, " \
           f"align_corners={align})"


GRID_OPS = {
    "affine_grid_generator": affine_grid,
    "grid_sampler": grid_sampler, "grid_sampler_2d": grid_sampler, "grid_sampler_3d": grid_sampler,
}
