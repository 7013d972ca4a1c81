"""A float32 tape stays float32 in backward, so a gradient that underflows in float32
(as it does in PyTorch) is reported as zero, not as a float64 number that flows."""

from __future__ import annotations

import numpy as np
import pytest

import gradflow
from gradflow.engine import Tape

UNDERFLOW_MODEL = """
    gradflow: 1
    inputs:
      n: {shape: [3], dtype: int, value: [1, 2, 3]}
      t: {shape: [3], value: [1.0e-30, 1.0e-30, 1.0e-30]}
      s: {shape: [3], value: [1.0e-30, 1.0e-30, 1.0e-30]}
    params:
      w: {shape: [3], init: ones}
    graph:
      loss: sum((w * t) * n * s)
    losses: [loss]
"""


def underflowing_tape(dtype):
    """loss = sum((w * t) * n * s): w's gradient is t * n * s = ~1e-60, below float32's range."""
    tape = Tape(dtype)
    w = tape.param(np.ones(3))
    t, s = tape.leaf(np.full(3, 1e-30)), tape.leaf(np.full(3, 1e-30))
    n = tape.leaf(np.array([1, 2, 3]))
    loss = tape.apply("sum", (w * t) * n * s)
    return tape, w, loss


def test_backward_keeps_float32_through_an_integer_factor():
    tape, w, loss = underflowing_tape(np.float32)
    grads = tape.backward(loss, keep=True)
    assert all(g.dtype == np.float32 for g in grads if g is not None)
    np.testing.assert_array_equal(grads[w.index], np.zeros(3, dtype=np.float32))


def test_backward_in_float64_keeps_the_tiny_gradient():
    tape, w, loss = underflowing_tape(np.float64)
    np.testing.assert_allclose(tape.backward(loss)[w.index], [1e-60, 2e-60, 3e-60])


def test_float32_analysis_reports_an_underflowed_gradient_as_zero(write_model):
    path = write_model(UNDERFLOW_MODEL)
    assert gradflow.analyze(gradflow.load(path, dtype="float32")).status("w", "loss") == "zero"
    assert gradflow.analyze(gradflow.load(path)).status("w", "loss") == "flows"


@pytest.mark.torch
def test_float32_gradient_matches_torch_float32(write_model):
    torch = pytest.importorskip("torch")
    report = gradflow.analyze(gradflow.load(write_model(UNDERFLOW_MODEL), dtype="float32"))
    w = torch.ones(3, dtype=torch.float32, requires_grad=True)
    t = s = torch.full((3,), 1e-30, dtype=torch.float32)
    ((w * t) * torch.tensor([1, 2, 3]) * s).sum().backward()
    ours = report.grad("w", "loss")
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(ours, w.grad.numpy())


def test_max_splitting_a_tie_keeps_float32_in_its_rule():
    # the tied count is taken in g's dtype, as torch divides: no float64 detour from an int64 count
    from gradflow.engine.kernels import reduce_extreme_vjp
    x = np.array([[3.0, 3.0, 1.0]], dtype=np.float32)
    g = np.ones(1, dtype=np.float32)
    grad = reduce_extreme_vjp(np.argmax)(g, np.max(x, axis=1), x, axis=1, ties="split")
    assert grad.dtype == np.float32 and grad.tolist() == [[0.5, 0.5, 0.0]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_to_num_replaces_infinities_by_the_tapes_own_largest_finite_numbers(dtype):
    """float64's largest number is inf in float32: the default must be the run's dtype's, as torch's."""
    tape = Tape(dtype)
    x = tape.param(np.array([np.nan, np.inf, -np.inf, 1.5]))
    out = tape.apply("nan_to_num", x)
    big = np.finfo(dtype).max
    assert out.value.dtype == dtype
    np.testing.assert_array_equal(out.value, np.array([0.0, big, -big, 1.5], dtype=dtype))
    grads = tape.backward(tape.apply("sum", out))
    np.testing.assert_array_equal(grads[x.index], np.array([0, 0, 0, 1], dtype=dtype))


INDICES_MODEL = """
    gradflow: 1
    inputs:
      n: {shape: [3], dtype: int, value: [1, 2, 3]}
      m: {shape: [3], value: [1.0, 0.0, 1.0]}
    params:
      e: {shape: [4, 2]}
    graph:
      shifted: maximum(n - 2, 0)
      kept: where(m, n, 0) * 1
      capped: minimum(3, n + 1) - 1
      halved: n * 0.5
      divided: n / 2
      loss: sum(embedding(shifted, e)) + sum(embedding(kept, e)) + sum(embedding(capped, e)) + sum(halved + divided)
    losses: [loss]
"""


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_whole_numbers_beside_integer_tensors_keep_them_integers_that_can_index(write_model, dtype):
    """i - 1, maximum(i, 0), where(m, i, 0): integers, as numpy's and torch's, so they index an
    embedding (they were floats, which embedding refused); a float number or / gives floats."""
    model = gradflow.load(write_model(INDICES_MODEL), dtype=dtype)
    model.materialize()
    values = {name: model.entries[name].value for name in ("shifted", "kept", "capped", "halved", "divided")}
    assert {name: v.dtype.kind for name, v in values.items()} == {
        "shifted": "i", "kept": "i", "capped": "i", "halved": "f", "divided": "f"}
    assert [v.tolist() for v in values.values()] == [[0, 0, 1], [1, 0, 3], [1, 2, 2], [0.5, 1, 1.5], [0.5, 1, 1.5]]
    assert values["halved"].dtype == np.dtype(dtype)
