"""Every op's gradient against central finite differences, and its shape rule against its forward.

CASES is the test table: one row per op, each a list of ``Case``. A guard test
fails when an op of OPS has no row, so adding an op means adding its row here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

from gradflow.engine import OPS, Tape
from gradflow.engine.ops import REQUIRED

SHAPES = [(), (4,), (3, 4), (1, 4)]


@dataclass
class Case:
    """Inputs for one op call: ``make(rng)`` returns the input arrays; ``attrs`` the static arguments."""
    id: str
    make: Callable
    attrs: dict = field(default_factory=dict)


def normal(*shapes, low=None):
    """Inputs drawn from N(0, 1) (or uniform in [low, low + 1] for ops that need a domain)."""
    def make(rng):
        if low is None:
            return [rng.normal(size=s) for s in shapes]
        return [rng.uniform(low, low + 1, size=s) for s in shapes]
    return make


def unary(low=None, **attrs):
    return [Case(f"{list(s)}", normal(s, low=low), attrs) for s in SHAPES]


def binary(low=None):
    pairs = [(s, s) for s in SHAPES] + [((3, 4), (1, 4)), ((3, 4), ()), ((4,), (3, 4))]
    return [Case(f"{list(a)}-{list(b)}", normal(a, b, low=low)) for a, b in pairs]


def reduction():
    cases = [Case(f"{list(s)}", normal(s)) for s in SHAPES]
    cases += [Case("axis0", normal((3, 4)), {"axis": 0}),
              Case("axis-1-keep", normal((3, 4)), {"axis": -1, "keepdims": True}),
              Case("axes01", normal((2, 3, 4)), {"axis": (0, 2)}),
              Case("row", normal((1, 4)), {"axis": 1})]
    return cases


CASES: dict[str, list[Case]] = {
    "add": binary(),
    "sub": binary(),
    "mul": binary(),
    "div": binary(low=0.5),
    "pow": binary(low=0.5),
    "matmul": [Case("2d", normal((3, 4), (4, 2))), Case("vec-mat", normal((4,), (4, 2))),
               Case("mat-vec", normal((3, 4), (4,))), Case("vec-vec", normal((4,), (4,))),
               Case("batched", normal((2, 3, 4), (4, 2))), Case("row", normal((1, 4), (4, 3)))],
    "neg": unary(),
    "exp": unary(),
    "log": unary(low=0.5),
    "tanh": unary(),
    "sigmoid": unary(),
    "relu": unary(),
    "square": unary(),
    "sum": reduction(),
    "mean": reduction(),
    "max": reduction(),
    "getitem": [Case("int", normal((4,)), {"index": 1}),
                Case("slice", normal((3, 4)), {"index": (slice(None), slice(1, 3))}),
                Case("none-ellipsis", normal((3, 4)), {"index": (Ellipsis, None, 2)}),
                Case("step", normal((1, 4)), {"index": (0, slice(None, None, -2))}),
                Case("scalar", normal(()), {"index": ()})],
    "stop_gradient": unary(),
}


def all_cases():
    for name, cases in CASES.items():
        for case in cases:
            yield pytest.param(name, case, id=f"{name}-{case.id}")


def scalar_of(name, arrays, attrs, weights):
    """sum(weights * op(*arrays)) on a fresh eager tape; returns (tape, inputs, loss)."""
    tape = Tape()
    inputs = [tape.param(a) if np.asarray(a).dtype.kind == "f" else tape.leaf(a) for a in arrays]
    out = tape.apply(name, *inputs, **attrs)
    loss = tape.apply("sum", out * tape.constant(weights))
    return tape, inputs, loss


def eager_output(name, arrays, attrs):
    tape = Tape()
    return tape.apply(name, *[tape.leaf(a) for a in arrays], **attrs)


def finite_difference(name, arrays, attrs, weights, k, eps=1e-6):
    grad = np.zeros_like(arrays[k])
    for i in np.ndindex(np.shape(arrays[k])):
        values = []
        for sign in (1, -1):
            shifted = [np.array(a, copy=True) for a in arrays]
            shifted[k][i] += sign * eps
            values.append(scalar_of(name, shifted, attrs, weights)[2].value)
        grad[i] = (values[0] - values[1]) / (2 * eps)
    return grad


@pytest.mark.parametrize("name,case", list(all_cases()))
def test_op_gradient_matches_finite_differences(name, case):
    rng = np.random.default_rng(0)
    arrays = [np.asarray(a) for a in case.make(rng)]
    weights = rng.normal(size=eager_output(name, arrays, case.attrs).shape)
    tape, inputs, loss = scalar_of(name, arrays, case.attrs, weights)
    grads = tape.backward(loss)
    for k, (x, rule) in enumerate(zip(inputs, OPS[name].vjps_for(len(inputs)))):
        got = grads[x.index]
        if rule is None or not x.requires_grad:
            assert got is None, f"input {k} of {name} must receive no gradient"
            continue
        expected = finite_difference(name, arrays, case.attrs, weights, k)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=f"input {k}")
        assert np.shape(got) == x.shape


@pytest.mark.parametrize("name,case", list(all_cases()))
def test_op_shape_rule_matches_forward(name, case):
    arrays = [np.asarray(a) for a in case.make(np.random.default_rng(0))]
    eager = eager_output(name, arrays, case.attrs)
    lazy_tape = Tape(eager=False)
    lazy = lazy_tape.apply(name, *[lazy_tape.leaf(shape=a.shape, dtype=a.dtype) for a in arrays],
                           **case.attrs)
    assert lazy.shape == eager.shape
    assert lazy.dtype == eager.dtype


def test_every_op_has_a_gradient_test_row():
    assert set(OPS) - set(CASES) == set()


def test_every_required_attribute_is_exercised():
    for name, op in OPS.items():
        required = {k for k, v in op.attrs.items() if v is REQUIRED}
        for case in CASES[name]:
            assert required <= set(case.attrs), f"{name} case {case.id} lacks {required}"
