"""Integer arithmetic that indexes: remainder and fmod of integer tensors are Python's % and C's
fmod in int64 (an integer divisor of 0 is one located error, as torch raises), abs of an integer
is an integer, and searchsorted is bisect's left or right insertion point; each can index an
embedding in a model file. Python itself is the oracle here, so these run without torch."""

from __future__ import annotations

import bisect
import math

import numpy as np
import pytest
from click.testing import CliRunner

import gradflow
from gradflow.cli.main import cli
from gradflow.engine import Tape
from gradflow.errors import ShapeError

A = np.arange(-7, 8)


def eager(name, *arrays, **attrs):
    tape = Tape()
    return tape.apply(name, *[tape.leaf(np.asarray(a)) for a in arrays], **attrs)


def lazy_dtype(name, *arrays, **attrs):
    tape = Tape(eager=False)
    return tape.apply(name, *[tape.leaf(shape=np.shape(a), dtype=np.asarray(a).dtype) for a in arrays], **attrs).dtype


@pytest.mark.parametrize("b", [-3, -2, 1, 2, 3, 7])
@pytest.mark.parametrize("name, python", [("remainder", lambda a, b: a % b),
                                          ("fmod", lambda a, b: int(math.fmod(a, b)))])
def test_integer_remainder_and_fmod_are_pythons_and_cs_and_stay_int64(name, python, b):
    for divisor in (np.array(b), np.full(A.shape, b)):   # a number beside the tensor, or a tensor
        out = eager(name, A, divisor).value
        assert out.dtype == np.int64 and lazy_dtype(name, A, divisor) == np.int64
        assert out.tolist() == [python(int(a), b) for a in A]


@pytest.mark.parametrize("name", ["remainder", "fmod"])
def test_float_remainder_and_fmod_are_pythons_and_cs(name):
    a, b = np.array([5.5, -5.5, 5.5, -5.5, 1.0, -1.0, 1.0, 0.25]), np.array([2.0, 2.0, -2.0, -2.0, np.inf, np.inf,
                                                                           -np.inf, 0.125])
    python = (lambda x, y: x % y) if name == "remainder" else math.fmod
    np.testing.assert_array_equal(eager(name, a, b).value, [python(x, y) for x, y in zip(a, b)])
    with np.errstate(invalid="ignore"):
        assert np.isnan(eager(name, np.array([3.0, 0.0]), np.array(0.0)).value).all()   # by 0: NaN, as torch's


@pytest.mark.parametrize("name", ["remainder", "fmod"])
def test_integer_remainder_by_zero_is_an_error_as_in_torch(name):
    with pytest.raises(ZeroDivisionError, match=f"^{name} of an integer tensor by 0 "):
        eager(name, A, np.array([2, 0] * 7 + [1]))
    with pytest.raises(ZeroDivisionError):
        eager(name, A, np.array(0))


INDICES = """
gradflow: 1
inputs:
  i: {shape: [4], dtype: int, value: [-5, 3, 4, 2]}
  z: {shape: [4], dtype: int, value: [3, 2, 3, 1]}
params:
  e: {shape: [6, 2]}
graph:
  r: remainder(i, 3)
  f: fmod(i, z) + 2
  a: abs(i)
  loss: sum(embedding(r, e)) + sum(embedding(f, e)) + sum(embedding(a, e))
losses: [loss]
"""


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_integer_remainder_fmod_and_abs_index_an_embedding_in_a_model(write_model, dtype):
    model = gradflow.load(write_model(INDICES), dtype=dtype)
    report = gradflow.analyze(model)
    values = {name: model.entries[name].value for name in ("r", "f", "a")}
    assert {name: v.dtype for name, v in values.items()} == {"r": np.int64, "f": np.int64, "a": np.int64}
    assert [v.tolist() for v in values.values()] == [[1, 0, 1, 2], [0, 3, 3, 2], [5, 3, 4, 2]]
    assert report.status("e", "loss") == "flows"


def test_integer_remainder_by_zero_in_a_model_is_one_located_error(write_model):
    path = write_model(INDICES.replace("value: [3, 2, 3, 1]", "value: [3, 0, 3, 1]"))
    result = CliRunner().invoke(cli, ["check", path])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"{path}:9:6: error: graph.f ({path}:9): fmod failed: fmod of an integer tensor by 0 "
        "(torch raises ZeroDivisionError)"]


def test_abs_of_an_integer_tensor_is_an_integer_tensor():
    tape = Tape()
    out = tape.apply("abs", tape.leaf(A))
    assert out.value.dtype == np.int64 and lazy_dtype("abs", A) == np.int64
    assert out.value.tolist() == [abs(int(a)) for a in A]
    assert tape.apply("take", tape.leaf(np.arange(10.0)), out).value.tolist() == [float(abs(int(a))) for a in A]


@pytest.mark.parametrize("name", ["round", "floor", "ceil", "trunc"])
def test_rounding_an_integer_tensor_leaves_it_as_it_is_an_integer_tensor(name):
    tape = Tape()
    out = tape.apply(name, tape.leaf(A))
    assert out.value.dtype == np.int64 and lazy_dtype(name, A) == np.int64 and out.value.tolist() == A.tolist()
    halves = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.7, 0.7])   # floats: numpy's, half to even as torch
    python = {"round": round, "floor": math.floor, "ceil": math.ceil, "trunc": math.trunc}[name]
    floats = eager(name, halves).value
    assert floats.dtype == np.float64 and floats.tolist() == [float(python(float(h))) for h in halves]


@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_is_bisects_insertion_point(right):
    rng = np.random.default_rng(3)
    for boundaries, x in [(np.sort(rng.integers(0, 6, size=9)), rng.integers(-1, 8, size=20)),
                          (np.sort(rng.normal(size=16)), rng.normal(size=(4, 5))),
                          (np.array([1.0, 2.0, 2.0, 2.0, 3.0]), np.array([2.0, 1.0, 3.0, 0.0, 4.0]))]:
        find = bisect.bisect_right if right else bisect.bisect_left
        out = eager("searchsorted", boundaries, x, right=right)
        assert out.value.dtype == np.int64 and not out.requires_grad
        assert out.value.tolist() == np.vectorize(lambda v: find(boundaries.tolist(), v))(x).tolist()


def test_searchsorted_of_rows_searches_each_values_row_in_its_own():
    boundaries, x = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]]), np.array([[2.5, 0.0], [2.5, 7.0]])
    assert eager("searchsorted", boundaries, x).value.tolist() == [[2, 0], [1, 3]]


@pytest.mark.parametrize("boundaries, x, attrs, message", [
    ((2, 3), (4,), {}, "boundaries [2, 3] for values [4]: boundaries need one axis, or the values' number of axes "
                       "and all but the last of their sizes"),
    ((2, 3), (3, 1), {}, "boundaries [2, 3] for values [3, 1]"),
    ((), (4,), {}, "boundaries [] for values [4]"),
    ((3,), (4,), {"right": 1}, "right must be True or False, not 1"),
])
def test_searchsorted_shape_rule_refuses_what_torch_refuses(boundaries, x, attrs, message):
    tape = Tape(eager=False)
    with pytest.raises(ShapeError, match=f"^searchsorted: {message.replace('[', '.').replace(']', '.')}"):
        tape.apply("searchsorted", tape.leaf(shape=boundaries), tape.leaf(shape=x), **attrs)
