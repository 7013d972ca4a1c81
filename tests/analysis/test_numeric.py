"""Gradient statistics: a large gradient taken a block at a time gives what one pass over
the whole array gives."""

from __future__ import annotations

import numpy as np
import pytest

from gradflow.analysis import numeric
from gradflow.engine import quiet


def large_gradient(dtype) -> np.ndarray:
    g = np.random.default_rng(0).normal(size=(600, 500)).astype(dtype)
    g[::7] = 0.0
    g[3, ::2] = -0.0
    g[590, 499] = 40.0         # the largest entries, in the last block
    g[590, 498] = -39.0
    return g


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("poison", [None, np.inf, np.nan])
def test_grad_stats_by_blocks_equal_one_pass_over_the_whole_array(monkeypatch, dtype, poison):
    g = large_gradient(dtype)
    if poison is not None:
        g[100, 100] = poison
    assert g.size > 2 * numeric.BLOCK
    with quiet():
        blocks = numeric.grad_stats(g)
        monkeypatch.setattr(numeric, "BLOCK", g.size)
        whole = numeric.grad_stats(g)
        monkeypatch.setattr(numeric, "TAKEN_WHOLE", g.size)   # taken whole, without the blocks' scratch
        small = numeric.grad_stats(g)
    assert repr(small) == repr(whole)
    assert blocks["norm"] == pytest.approx(whole["norm"], rel=1e-13, nan_ok=True)
    exact = {k: repr(v) for k, v in blocks.items() if k != "norm"}     # repr: a NaN equals a NaN
    assert exact == {k: repr(v) for k, v in whole.items() if k != "norm"}
    assert repr(blocks["max_abs"]) == repr(40.0 if poison is None else float(np.max(np.abs(g))))
    assert blocks["zero_fraction"] == float(np.count_nonzero(g == 0) / g.size)
    assert blocks["nonfinite"] == int(np.count_nonzero(~np.isfinite(g)))


@pytest.mark.parametrize("size", [10, numeric.TAKEN_WHOLE + 1, 3 * numeric.BLOCK])
@pytest.mark.parametrize("negative", ["all", "first half", "second half"])
def test_max_abs_of_signed_zeros_is_plus_zero_whole_or_by_blocks(size, negative):
    g = np.zeros(size)
    g[{"all": slice(None), "first half": slice(size // 2), "second half": slice(size // 2, None)}[negative]] = -0.0
    stats = numeric.grad_stats(g)
    assert repr(stats["max_abs"]) == repr(float(np.max(np.abs(g)))) == "0.0"   # as torch's g.abs().max()
    assert stats["zero_fraction"] == 1.0 and stats["norm"] == 0.0
