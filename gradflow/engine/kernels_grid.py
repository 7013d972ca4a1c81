"""Array code of grid_sample: x [N, C, *spatial] read at the points of grid [N, *out, k], bilinear
(trilinear for 3-d) or nearest, as torch.nn.functional.grid_sample.

A point's coordinates run from -1 to 1 across each spatial axis, the last axis first (x, y, z);
align_corners says whether -1 and 1 are the centres of the corner entries or their outer edges.
Each source position is worked out as torch's kernels do: unnormalised, reflected off the
edges (padding_mode="reflection"), clipped into the input (border, reflection), each step's
slope kept for the grid's gradient, 0 where a point is clipped, as torch's. A corner outside the
input reads 0 (zeros) and gets no gradient.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np


def reflected(pos, size: int, align: bool):
    """pos reflected off the input's edges (the centres of the end entries, or their outer edges),
    and its slope (+1 or -1), as torch's reflect_coordinates."""
    low, high = (0, 2 * (size - 1)) if align else (-1, 2 * size - 1)   # twice each edge
    if low == high:
        return np.zeros_like(pos), np.zeros_like(pos)
    start, span = low / 2, (high - low) / 2
    pos = pos - start
    sign = np.where(pos < 0, -1, 1)
    pos = np.abs(pos)
    extra, even = np.fmod(pos, span), np.floor(pos / span) % 2 == 0
    return np.where(even, extra + start, span - extra + start), np.where(even, sign, -sign)


def source(coord, size: int, align: bool, padding: str):
    """(the source position along one axis of every point, its slope by the coordinate)."""
    if align:
        pos, scale = (coord + 1) / 2 * (size - 1), (size - 1) / 2
    else:
        pos, scale = ((coord + 1) * size - 1) / 2, size / 2
    slope = np.full(np.shape(coord), scale, dtype=coord.dtype)
    if padding == "reflection":
        pos, flip = reflected(pos, size, align)
        slope = slope * flip
    if padding != "zeros":   # the edges count as outside: no gradient there, as torch's
        inside = (pos > 0) & (pos < size - 1)
        pos, slope = np.clip(pos, 0, size - 1), np.where(inside, slope, 0)
    return pos, slope


def positions(x, grid, padding, align):
    """The source positions along each spatial axis, the first axis first (grid's last), and their slopes."""
    k = x.ndim - 2
    pairs = [source(grid[..., k - 1 - a], x.shape[2 + a], align, padding) for a in range(k)]
    return [p for p, _ in pairs], [s for _, s in pairs]


def taps(x, pos, mode):
    """(weights, per-axis weight factors, index tuple, inside mask) of each corner a point reads:
    2 ** k of them (bilinear), or the nearest entry (rounded half to even, as torch's)."""
    sizes, n = x.shape[2:], np.arange(x.shape[0]).reshape((-1,) + (1,) * (pos[0].ndim - 1))
    if mode == "nearest":
        bits, low = [(0,)] * len(pos), [np.rint(p) for p in pos]
    else:
        bits, low = [(0, 1)] * len(pos), [np.floor(p) for p in pos]
    for corner in itertools.product(*bits):
        at = [lo + b for lo, b in zip(low, corner)]
        inside = np.logical_and.reduce([(i >= 0) & (i <= s - 1) for i, s in zip(at, sizes)])
        index = (n,) + tuple(np.where(inside, i, 0).astype(np.intp) for i in at)
        if mode == "nearest":
            yield None, [], corner, index, inside
            continue
        factors = [p - lo if b else lo + 1 - p for p, lo, b in zip(pos, low, corner)]
        yield functools.reduce(np.multiply, factors[::-1]), factors, corner, index, inside   # x's first, as torch's


def channels_last(x):
    return np.moveaxis(x, 1, -1)


def grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False):
    xt, out = channels_last(x), None
    for weight, _, _, index, inside in taps(x, positions(x, grid, padding_mode, align_corners)[0], mode):
        value = np.where(inside[..., None], xt[index], 0)
        term = value if weight is None else value * weight[..., None]
        out = term if out is None else out + term
    return np.ascontiguousarray(np.moveaxis(out, -1, 1))


def grid_sample_vjp_x(g, ans, x, grid, mode="bilinear", padding_mode="zeros", align_corners=False):
    gt, out = channels_last(g), np.zeros(channels_last(x).shape, dtype=g.dtype)
    for weight, _, _, index, inside in taps(x, positions(x, grid, padding_mode, align_corners)[0], mode):
        share = gt if weight is None else gt * weight[..., None]
        np.add.at(out, index, np.where(inside[..., None], share, 0))   # points may share a corner
    return np.moveaxis(out, -1, 1)


def grid_sample_vjp_grid(g, ans, x, grid, mode="bilinear", padding_mode="zeros", align_corners=False):
    """Each corner's value (0 outside) times g, summed over the channels, times the derivative
    of its weight by each source position, times that position's slope; 0 for nearest, as torch."""
    if mode == "nearest":
        return np.zeros(grid.shape, dtype=np.result_type(g, grid))
    pos, slopes = positions(x, grid, padding_mode, align_corners)
    xt, gt, k = channels_last(x), channels_last(g), len(pos)
    by_pos = [0] * k
    for _, factors, corner, index, inside in taps(x, pos, mode):
        read = np.sum(np.where(inside[..., None], xt[index], 0) * gt, axis=-1)
        for a in range(k):
            others = functools.reduce(np.multiply, [f for b, f in enumerate(factors) if b != a][::-1])
            by_pos[a] = by_pos[a] + (read * others if corner[a] else -(read * others))
    return np.stack([by_pos[a] * slopes[a] for a in reversed(range(k))], axis=-1)
