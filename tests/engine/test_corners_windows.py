"""Corners of the window, sampling and scatter-reduce ops against PyTorch, in float32 and float64:
max pools' ties and NaN (torch's kernel takes every NaN it meets, so the last one wins), grid_sample
at points on the edges and beyond them, scatter_reduce's tied extremes (x's own entry counted even
where include_self leaves it out, as torch's), NaN, and products with one and two zeros in a place."""

from __future__ import annotations

import numpy as np
import pytest

from gradflow.engine import Tape

torch = pytest.importorskip("torch")
F = torch.nn.functional
pytestmark = pytest.mark.torch

NAN, INF = np.nan, np.inf


def ours(name, arrays, attrs, upstream, dtype):
    tape = Tape(dtype)
    inputs = [tape.param(a) if a.dtype.kind == "f" else tape.leaf(a) for a in arrays]
    with np.errstate(all="ignore"):   # an eager forward of NaN and inf complains, as a model run does not
        out = tape.apply(name, *inputs, **attrs)
        grads = tape.backward(tape.apply("sum", out * tape.constant(upstream)))
    return out.value, [grads[x.index] if x.requires_grad else None for x in inputs]


def theirs(fn, arrays, upstream, dtype):
    inputs = [torch.tensor(a.astype(dtype) if a.dtype.kind == "f" else a, requires_grad=a.dtype.kind == "f")
              for a in arrays]
    out = fn(*inputs)
    out.backward(torch.as_tensor(upstream.astype(dtype)))
    return out.detach().numpy(), [x.grad.numpy() if x.grad is not None else None for x in inputs]


def same_as_torch(name, fn, arrays, attrs, dtype, exact):
    """Values and gradients (upstream 1, 2, 3, ...) equal torch's: bit for bit where ``exact``."""
    arrays = [np.asarray(a) for a in arrays]
    size = fn(*[torch.tensor(a) for a in arrays]).shape
    upstream = np.arange(1.0, np.prod(size) + 1).reshape(tuple(size))
    value, grads = ours(name, arrays, attrs, upstream, dtype)
    value_t, grads_t = theirs(fn, arrays, upstream, dtype)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    check = np.testing.assert_array_equal if exact else lambda a, b, **kw: np.testing.assert_allclose(a, b, **tol, **kw)
    check(value, value_t)
    for k, (mine, other) in enumerate(zip(grads, grads_t)):
        if other is not None:
            check(mine, other, err_msg=f"input {k}")
            assert mine.dtype == dtype


def window(values, k):
    return np.array(values, dtype=float).reshape((1, 1) + (2,) * k)


POOLS = {
    "tie": [1.0] * 8,
    "two-nans": [1.0, NAN, 5.0, NAN, 0.0, 2.0, 3.0, 4.0],
    "nan-and-inf": [INF, 1.0, NAN, 2.0, 0.0, -INF, 3.0, 4.0],
    "all-minus-inf": [-INF] * 8,
    "inf-tie": [0.0, INF, 1.0, INF, 2.0, 3.0, 4.0, 5.0],
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("corner", list(POOLS))
@pytest.mark.parametrize("k", [2, 3])
def test_max_pool_ties_and_nan_give_the_gradient_where_torch_gives_it(k, corner, dtype):
    values = POOLS[corner][:2 ** k] if k == 3 else POOLS[corner][:4]
    fn = F.max_pool2d if k == 2 else F.max_pool3d
    same_as_torch(f"max_pool{k}d", lambda x: fn(x, 2), [window(values, k)], {"kernel": 2}, dtype, exact=True)


def test_max_pool_nan_in_overlapping_windows():
    x = np.arange(36.0).reshape(1, 1, 6, 6) % 7
    x[0, 0, 2, 2] = x[0, 0, 3, 3] = NAN
    for dtype in (np.float32, np.float64):
        same_as_torch("max_pool2d", lambda t: F.max_pool2d(t, 3, 1), [x], {"kernel": 3, "stride": 1}, dtype, True)
        cube = np.stack([x[0, 0]] * 3)[None, None]
        same_as_torch("max_pool3d", lambda t: F.max_pool3d(t, 2, 1), [cube], {"kernel": 2, "stride": 1}, dtype, True)


# points on the corners, on the edges, just inside, beyond, and halfway (nearest's half to even)
EDGES = np.array([[[[-1.0, -1.0], [1.0, 1.0], [1.0, -1.0], [-1.0, 0.2], [0.999, 0.0], [1.6, 0.3],
                    [-2.7, 3.1], [0.25, 1 / 3], [0.0, 0.0]]]])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_on_and_beyond_the_edges(mode, pad, align, dtype):
    x = np.arange(1.0, 13.0).reshape(1, 1, 3, 4)
    attrs = {"mode": mode, "padding_mode": pad, "align_corners": align}
    same_as_torch("grid_sample", lambda x, g: F.grid_sample(x, g, **attrs), [x, EDGES], attrs, dtype, exact=False)


IDX = np.array([0, 0, 1, 1, 2, 2])
SCATTERS = {   # x, src, reduce
    "amax-ties": ([1.0, 5.0, 2.0, 7.0], [5.0, 5.0, 3.0, 1.0, 2.0, 2.0], "amax"),
    "amin-ties": ([1.0, 0.0, 2.0, 7.0], [1.0, 1.0, 0.0, 3.0, 2.0, 4.0], "amin"),
    "amax-nan": ([NAN, 1.0, 2.0, 7.0], [5.0, NAN, 3.0, NAN, 2.0, 1.0], "amax"),
    "amin-inf": ([INF, 1.0, -INF, 7.0], [INF, INF, 3.0, 1.0, 2.0, -INF], "amin"),
    "prod-one-zero": ([2.0, 3.0, 0.0, 7.0], [0.0, 4.0, 5.0, 0.0, 5.0, 2.0], "prod"),
    "prod-two-zeros": ([2.0, 0.0, 3.0, 7.0], [0.0, 0.0, 0.0, 4.0, 0.0, 0.0], "prod"),
    "prod-inf-nan": ([2.0, INF, 2.0, 7.0], [3.0, 0.0, NAN, 2.0, 1.0, INF], "prod"),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("own", [True, False])
@pytest.mark.parametrize("corner", list(SCATTERS))
def test_scatter_reduce_corners_match_torch(corner, own, dtype):
    x, src, reduce = (np.array(v) if isinstance(v, list) else v for v in SCATTERS[corner])
    attrs = {"axis": 0, "reduce": reduce, "include_self": own}
    same_as_torch("scatter_reduce", lambda x, idx, s: x.scatter_reduce(0, idx, s, reduce, include_self=own),
                  [x, IDX, src], attrs, dtype, exact=False)
