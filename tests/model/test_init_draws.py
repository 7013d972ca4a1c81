"""Random initial values in float32 are drawn a chunk at a time into the result: the same
numbers as drawing the whole tensor in float64 and converting it."""

from __future__ import annotations

import numpy as np
import pytest

from gradflow.model import init
from gradflow.model.init import initial_value

SHAPES = [(), (0,), (3, 5), (2 * init.CHUNK + 3,), (init.CHUNK, 2)]
KINDS = [("normal", (0.5, 2.0)), ("normal", ()), ("uniform", (-1.0, 3.0)), ("glorot", ()), ("he", ())]


def whole(kind, args, shape, dtype, seed, name):
    """What initial_value gave before drawing in chunks: every number at once, then astype."""
    rng = init.generator(seed, name)
    if kind == "normal":
        mean, std = args or (0.0, 1.0)
        values = rng.normal(mean, std, size=shape)
    elif kind == "uniform":
        values = rng.uniform(args[0], args[1], size=shape)
    elif kind == "glorot":
        fan_in, fan_out = init.fans(shape)
        bound = np.sqrt(6.0 / (fan_in + fan_out))
        values = rng.uniform(-bound, bound, size=shape)
    else:
        values = rng.normal(0.0, np.sqrt(2.0 / init.fans(shape)[0]), size=shape)
    return values.astype(dtype, copy=False)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int64])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind,args", KINDS)
def test_random_inits_drawn_in_chunks_equal_one_draw_converted(kind, args, shape, dtype):
    if kind in ("glorot", "he") and len(shape) < 2:
        return   # refused before any value is drawn (init_problem)
    got = initial_value(kind, args, shape, np.dtype(dtype), 7, "layer.w")
    want = whole(kind, args, shape, dtype, 7, "layer.w")
    assert got.__class__ is want.__class__ is np.ndarray
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
