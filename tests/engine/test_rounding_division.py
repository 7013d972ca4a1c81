"""floor_divide and trunc_divide, and sign of integers, with Python itself as the oracle: its //
of floats takes torch's steps (fmod first, then a whole quotient snapped to), so 1.0 // 0.1 is
9.0 where floor(1.0 / 0.1) is 10.0; integer quotients are exact and stay int64 so that they
index, an integer divisor of 0 is an error (one located error in a model file), a float divisor
of 0 gives a / b; no gradient passes either division. These run without torch."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from click.testing import CliRunner

import gradflow
from gradflow.cli.main import cli
from gradflow.engine import OPS, Tape

A = np.arange(-7, 8)
INF, NAN = np.inf, np.nan


def eager(name, *arrays):
    tape = Tape()
    with np.errstate(all="ignore"):   # a float divided by 0
        return tape.apply(name, *[tape.leaf(np.asarray(a)) for a in arrays])


def lazy_dtype(name, *arrays):
    tape = Tape(eager=False)
    return tape.apply(name, *[tape.leaf(shape=np.shape(a), dtype=np.asarray(a).dtype) for a in arrays]).dtype


def c_division(a: int, b: int) -> int:
    """C's (and torch's) integer division: the exact quotient cut toward zero."""
    return int(Fraction(a, b))


def same_floats(ours, expected) -> None:
    """Equal, NaN where NaN, and numbers (zeros too) of the same sign."""
    ours, expected = np.asarray(ours), np.asarray(expected, dtype=float)
    np.testing.assert_array_equal(ours, expected)
    numbers = ~np.isnan(expected)
    assert np.signbit(ours[numbers]).tolist() == np.signbit(expected[numbers]).tolist()


@pytest.mark.parametrize("b", [-7, -3, -2, -1, 1, 2, 3, 5])
@pytest.mark.parametrize("name, python", [("floor_divide", lambda a, b: a // b), ("trunc_divide", c_division)])
def test_integer_rounding_divisions_are_pythons_and_cs_and_stay_int64(name, python, b):
    for divisor in (np.array(b), np.full(A.shape, b)):   # a number beside the tensor, or a tensor
        out = eager(name, A, divisor).value
        assert out.dtype == np.int64 and lazy_dtype(name, A, divisor) == np.int64
        assert out.tolist() == [python(int(a), b) for a in A]


def test_integer_trunc_divide_is_exact_where_a_float_quotient_is_not():
    a, b = np.array([2 ** 62 + 1, -(2 ** 62) - 3, 2 ** 53 + 1, -(2 ** 63)]), np.array([3, 7, -1, 2])
    expected = [c_division(int(x), int(y)) for x, y in zip(a, b)]
    assert np.trunc(a / b).astype(np.int64).tolist() != expected   # float64 would round these
    assert eager("trunc_divide", a, b).value.tolist() == expected
    assert eager("floor_divide", a, b).value.tolist() == [int(x) // int(y) for x, y in zip(a, b)]


# quotients that are whole but for a rounding: floor(a / b) is a whole step off Python's a // b
NEAR_WHOLE = [(1.0, 0.1), (-1.1, 0.1), (-1.0, -0.1), (0.5, 0.1), (0.9, 0.1), (1.0, 0.2), (-3.0, 0.3), (-1.8, 0.3),
              (2.7, -0.1), (3.0, 0.1), (1e-300, 1e-301)]
SIGNS = [(5.5, 2.0), (-5.5, 2.0), (5.5, -2.0), (-5.5, -2.0), (0.0, 3.0), (-0.0, 3.0), (0.0, -3.0), (-0.5, 3.0),
         (0.5, -3.0), (6.0, 3.0), (-6.0, 3.0), (7.0, 0.5), (1e308, 1e-308), (5e-324, 1.0)]
BEYOND = [(1.0, INF), (-1.0, INF), (1.0, -INF), (-1.0, -INF), (0.0, INF), (INF, 2.0), (NAN, 2.0), (2.0, NAN)]


def test_float_floor_divide_is_pythons_floor_division_not_the_floor_of_the_quotient():
    a, b = (np.array(v) for v in zip(*NEAR_WHOLE, *SIGNS, *BEYOND))
    expected = [x // y for x, y in zip(a.tolist(), b.tolist())]
    same_floats(eager("floor_divide", a, b).value, expected)
    with np.errstate(all="ignore"):
        assert (np.floor(a / b) != expected)[:len(NEAR_WHOLE)].all()   # what the naive form gives


def test_float_floor_divide_of_many_tenths_is_pythons():
    rng = np.random.default_rng(0)
    a = np.concatenate([rng.integers(-100, 100, 2000) * 0.1, rng.normal(size=2000) * 10])
    b = rng.choice([0.1, -0.1, 0.2, 0.3, 0.7, -0.3, 3.0], size=a.size)
    same_floats(eager("floor_divide", a, b).value, [x // y for x, y in zip(a.tolist(), b.tolist())])


def truncated(q: float) -> float:
    return math.copysign(float(math.trunc(q)), q) if math.isfinite(q) else q


def test_float_trunc_divide_cuts_the_quotient_toward_zero():
    a, b = (np.array(v) for v in zip(*NEAR_WHOLE, *SIGNS, *BEYOND))
    same_floats(eager("trunc_divide", a, b).value, [truncated(x / y) for x, y in zip(a.tolist(), b.tolist())])
    assert eager("trunc_divide", np.array([-0.3, 0.3]), np.array(1.0)).value.tolist() == [-0.0, 0.0]


@pytest.mark.parametrize("name", ["floor_divide", "trunc_divide"])
def test_a_float_divided_by_zero_is_ieees_quotient_as_in_torch(name):
    a = np.array([3.0, -3.0, 0.0, NAN, INF])
    same_floats(eager(name, a, np.array(0.0)).value, [INF, -INF, NAN, NAN, INF])
    same_floats(eager(name, a, np.array(-0.0)).value, [-INF, INF, NAN, NAN, -INF])


@pytest.mark.parametrize("name, what", [("floor_divide", "floor division"), ("trunc_divide", "trunc division")])
def test_an_integer_divided_by_zero_is_an_error_as_in_torch(name, what):
    with pytest.raises(ZeroDivisionError, match=f"^{what} of an integer tensor by 0 "):
        eager(name, A, np.array([2, 0] * 7 + [1]))
    with pytest.raises(ZeroDivisionError):
        eager(name, A, np.array(0))


@pytest.mark.parametrize("name", ["floor_divide", "trunc_divide"])
def test_rounding_divisions_pass_no_gradient_and_keep_float32(name):
    tape = Tape(np.float32)
    a, b = tape.param(np.array([1.0, -2.5], np.float32)), tape.param(np.array([0.1, 0.7], np.float32))
    out = tape.apply(name, a, b)
    assert out.dtype == np.float32 and OPS[name].kind == "implicit"
    assert tape.backward(tape.apply("sum", out * a))[b.index] is None
    mixed = eager(name, A, np.array(2.5))
    assert mixed.value.dtype == np.float64 and lazy_dtype(name, A, np.array(2.5)) == np.float64


def test_sign_of_an_integer_tensor_is_an_integer_tensor_that_indexes():
    tape = Tape()
    out = tape.apply("sign", tape.leaf(A))
    assert out.value.dtype == np.int64 and lazy_dtype("sign", A) == np.int64
    assert out.value.tolist() == [(a > 0) - (a < 0) for a in A.tolist()]
    shifted = tape.apply("add", out, tape.leaf(np.int64(1)))
    assert tape.apply("take", tape.leaf(np.array([10.0, 20.0, 30.0])), shifted).value.tolist()[6:9] == [10, 20, 30]
    assert eager("sign", np.array([-2.5, 0.0, 3.0])).value.dtype == np.float64


INDICES = """
gradflow: 1
inputs:
  i: {shape: [5], dtype: int, value: [-5, 3, 7, 2, 11]}
  z: {shape: [5], dtype: int, value: [3, 2, -3, 1, 4]}
  x: {shape: [4], value: [1.0, -1.0, 0.3, 0.7]}
params:
  e: {shape: [9, 2]}
  w: {shape: [4], value: [1.0, -2.0, 0.5, 3.0]}
graph:
  f: floor_divide(i, 2) + 3
  t: trunc_divide(i, z) + 3
  s: sign(i) + 1
  q: floor_divide(x, 0.1)
  half: floor_divide(i, 2.0)
  loss_e: sum(embedding(f, e)) + sum(embedding(t, e)) + sum(embedding(s, e))
  loss_w: sum(floor_divide(w, 0.5) * x) + sum(q * w)
losses: [loss_e, loss_w]
"""


@pytest.mark.parametrize("dtype, tenths", [("float64", [9.0, -10.0, 2.0, 6.0]),
                                           ("float32", [9.0, -10.0, 3.0, 6.0])])   # torch's float32 too
def test_rounding_divisions_and_sign_of_integers_index_an_embedding_in_a_model(write_model, dtype, tenths):
    model = gradflow.load(write_model(INDICES), dtype=dtype)
    report = gradflow.analyze(model)
    values = {name: model.entries[name].value for name in ("f", "t", "s", "q", "half")}
    assert {name: v.dtype.kind for name, v in values.items()} == {"f": "i", "t": "i", "s": "i", "q": "f", "half": "f"}
    assert [values[n].tolist() for n in ("f", "t", "s")] == [[0, 4, 6, 4, 8], [2, 4, 1, 5, 5], [0, 2, 2, 2, 2]]
    assert values["q"].tolist() == tenths and values["half"].tolist() == [-3.0, 1.0, 3.0, 1.0, 5.0]
    assert report.status("e", "loss_e") == "flows"
    assert report.status("w", "loss_w") == "flows"           # through q * w, not through floor_divide(w, 0.5)
    assert [(c.op, c.kind) for c in report.pair("w", "loss_w").partially_cut_by] == [("floor_divide", "implicit")]


def test_an_integer_division_by_zero_in_a_model_is_one_located_error(write_model):
    path = write_model(INDICES.replace("value: [3, 2, -3, 1, 4]", "value: [3, 2, 0, 1, 4]"))
    result = CliRunner().invoke(cli, ["check", path])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"{path}:11:6: error: graph.t ({path}:11): trunc_divide failed: trunc division of an integer tensor by 0 "
        "(torch raises ZeroDivisionError)"]
