"""lgamma, digamma (and its derivative trigamma), erfinv and xlogy against Python's math module and
the identities these functions keep: lgamma is math.lgamma, erf undoes erfinv to the last digit
(erfc in the tail), digamma and trigamma keep their recurrences, reflections and known values from
tiny arguments through negative non-integers to large ones. float32 stays float32, float64's
answer rounded. No torch here: test_corners.py holds torch's poles and float32 results."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gradflow
from gradflow.engine import Tape
from gradflow.engine.kernels_math import digamma, erfinv, lgamma, trigamma, xlogy

EULER = 0.5772156649015329
RNG = np.random.default_rng(5)
# tiny, below 1, between negative integers, moderate, large
RANGES = {"tiny": 10.0 ** RNG.uniform(-300, -8, 50), "below-one": RNG.uniform(0.01, 1, 50),
          "negative": -RNG.uniform(0.01, 30, 200), "moderate": RNG.uniform(1, 30, 100),
          "large": 10.0 ** RNG.uniform(2, 300, 50)}
RANGES["negative"] = RANGES["negative"][RANGES["negative"] != np.round(RANGES["negative"])]


def quietly(fn, *args):
    with np.errstate(all="ignore"):
        return fn(*args)


@pytest.mark.parametrize("span", list(RANGES))
def test_lgamma_is_maths_lgamma(span):
    x = RANGES[span]
    np.testing.assert_allclose(lgamma(x), [math.lgamma(v) for v in x], rtol=1e-15, atol=0)


def test_lgamma_is_inf_at_its_poles_and_past_the_largest_float():
    x = np.array([0.0, -0.0, -1.0, -7.0, -1e300, -np.inf, np.inf, 1e307, np.nan])
    out = quietly(lgamma, x)
    assert out.tolist()[:-1] == [np.inf] * 8 and np.isnan(out[-1])


@pytest.mark.parametrize("y", [RNG.uniform(-1, 1, 500), 10.0 ** RNG.uniform(-300, -0.5, 200),
                               -(10.0 ** RNG.uniform(-300, -0.5, 200))], ids=["uniform", "small", "small-negative"])
def test_erf_undoes_erfinv_to_the_last_digit(y):
    x = erfinv(y)
    back = np.array([math.erf(v) for v in x])
    assert np.all(np.abs(back - y) <= np.spacing(np.abs(y)))
    np.testing.assert_array_equal(erfinv(-y), -x)


def test_erfinv_in_the_tail_is_erfcs_inverse_to_the_last_digits():
    near_one = 1 - 10.0 ** -RNG.uniform(0.5, 15.9, 300)
    x = erfinv(near_one)
    np.testing.assert_allclose([math.erfc(v) for v in x], 1 - near_one, rtol=1e-14)
    assert erfinv(np.array(1 - 2 ** -53)) == pytest.approx(5.863584748755168, rel=1e-15)


def test_erfinv_near_zero_is_its_slope_times_y_and_infinite_or_nan_past_the_ends():
    tiny = 10.0 ** RNG.uniform(-300, -9, 50)
    np.testing.assert_allclose(erfinv(tiny), tiny * math.sqrt(math.pi) / 2, rtol=1e-15)
    with np.errstate(invalid="ignore"):
        ends = erfinv(np.array([1.0, -1.0, 1.5, -1.0000001, np.inf, np.nan, 0.0, -0.0]))
    assert ends[:2].tolist() == [np.inf, -np.inf] and np.isnan(ends[2:6]).all()
    assert ends[6:].tolist() == [0.0, 0.0] and np.signbit(ends[6:]).tolist() == [False, True]


def test_digamma_and_trigamma_known_values():
    n = np.arange(1.0, 40.0)
    harmonic = np.cumsum(1 / n) - 1 / n   # H(n - 1)
    np.testing.assert_allclose(digamma(n), harmonic - EULER, rtol=1e-15, atol=1e-16)
    np.testing.assert_allclose(digamma(np.array([0.5, -0.5])), [-EULER - 2 * math.log(2), 2 - EULER - 2 * math.log(2)],
                               rtol=1e-15)
    squares = np.cumsum(1 / n ** 2) - 1 / n ** 2   # sum of 1 / k ** 2 for k < n
    np.testing.assert_allclose(trigamma(n), math.pi ** 2 / 6 - squares, rtol=1e-15, atol=4e-16)   # its cancellation
    np.testing.assert_allclose(trigamma(np.array([0.5, -0.5])), [math.pi ** 2 / 2, math.pi ** 2 / 2 + 4], rtol=1e-15)


@pytest.mark.parametrize("span", list(RANGES))
def test_digamma_and_trigamma_keep_their_recurrences(span):
    """psi(x + 1) = psi(x) + 1 / x and psi'(x + 1) = psi'(x) - 1 / x ** 2, each to its own rounding.
    (Below 0 trigamma's sine, of pi x as torch takes it, carries pi x's rounding: the reflection
    test keeps near 0.)"""
    x = RANGES[span]
    x = x[(np.abs(x) < 1e15) & (np.abs(x) > 1e-150)]   # x + 1 must not round, 1 / x ** 2 not overflow
    pairs = [(digamma, 1 / x)] + ([(trigamma, -1 / x ** 2)] if span != "negative" else [])
    for fn, change in pairs:
        scale = np.maximum(np.abs(change), np.abs(fn(x)))
        assert np.all(np.abs(fn(x + 1) - fn(x) - change) <= 4e-15 * scale), fn.__name__


def test_digamma_and_trigamma_keep_their_reflections_between_negative_integers():
    x = RANGES["negative"][RANGES["negative"] > -8]
    cot = 1 / np.tan(np.pi * x)
    np.testing.assert_allclose(digamma(1 - x) - digamma(x), np.pi * cot, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(trigamma(1 - x) + trigamma(x), np.pi ** 2 / np.sin(np.pi * x) ** 2, rtol=1e-13)


def test_digamma_and_trigamma_at_the_ends_follow_their_series():
    tiny, large = RANGES["tiny"], RANGES["large"][RANGES["large"] < 1e100]   # its cube must not overflow
    np.testing.assert_allclose(digamma(tiny), -1 / tiny - EULER + math.pi ** 2 / 6 * tiny, rtol=1e-15)
    with np.errstate(over="ignore", divide="ignore"):   # 1 / x ** 2 is inf below 1e-154, as torch's
        np.testing.assert_allclose(trigamma(tiny), 1 / tiny ** 2 + math.pi ** 2 / 6, rtol=1e-15)
    np.testing.assert_allclose(digamma(large), np.log(large) - 0.5 / large - 1 / (12 * large ** 2), rtol=1e-15)
    np.testing.assert_allclose(trigamma(large), 1 / large + 0.5 / large ** 2 + 1 / (6 * large ** 3), rtol=1e-15)


@pytest.mark.parametrize("span", ["below-one", "negative", "moderate"])
def test_digamma_is_lgammas_slope_and_trigamma_digammas(span):
    x = RANGES[span]
    x, h = x[np.abs(x - np.round(x)) > 0.05], 1e-4
    def slope(f, x):   # Richardson's five-point difference: error of order h ** 4
        return (f(x - 2 * h) - 8 * f(x - h) + 8 * f(x + h) - f(x + 2 * h)) / (12 * h)
    np.testing.assert_allclose(digamma(x), slope(lambda v: np.array([math.lgamma(t) for t in v]), x), rtol=1e-7,
                               atol=1e-8)
    np.testing.assert_allclose(trigamma(x), slope(digamma, x), rtol=1e-7)


@pytest.mark.parametrize("fn", [lgamma, digamma, trigamma, erfinv], ids=lambda f: f.__name__)
def test_float32_in_gives_float32_out_float64s_answer_rounded(fn):
    x = np.concatenate([RNG.uniform(-0.99, 0.99, 50), RNG.uniform(-9.9, 30, 50) if fn is not erfinv else []])
    if fn is trigamma:   # below 0 its sine is float32's, as torch's (test_corners.py)
        x = np.abs(x)
    x32 = x.astype(np.float32)
    out = quietly(fn, x32)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, quietly(fn, x32.astype(np.float64)).astype(np.float32))


def test_xlogy_is_x_log_y_and_0_where_x_is_0_but_nan_where_y_is():
    x, y = RNG.normal(size=20), RNG.uniform(0.1, 9, 20)
    np.testing.assert_allclose(xlogy(x, y), [a * math.log(b) for a, b in zip(x, y)], rtol=1e-15)
    with np.errstate(all="ignore"):
        out = xlogy(np.array([0.0, 0.0, 0.0, 0.0, 1.0, 1.0]), np.array([0.0, np.inf, -1.0, np.nan, 0.0, -1.0]))
    assert out[:3].tolist() == [0.0, 0.0, 0.0] and np.isnan(out[3]) and out[4] == -np.inf and np.isnan(out[5])
    assert xlogy(np.float32(2.0), np.array([3.0], np.float32)).dtype == np.float32


MODEL = """
gradflow: 1
inputs:
  y: {shape: [4], value: [0.0, 1.0, 2.0, 3.0]}
params:
  a: {shape: [4], value: [0.5, 1.5, 2.5, 3.5]}
  b: {shape: [4], value: [-0.5, 0.1, 0.3, 0.9]}
graph:
  nll: sum(lgamma(a) - xlogy(a - 1, y + 0.5) + digamma(a) * 0.5)
  tails: sum(erfinv(b) * y)
losses: [nll, tails]
"""


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_special_functions_in_a_model_file_pass_their_gradients(write_model, dtype):
    report = gradflow.analyze(gradflow.load(write_model(MODEL), dtype=dtype))
    a, b, y = np.array([0.5, 1.5, 2.5, 3.5]), np.array([-0.5, 0.1, 0.3, 0.9]), np.arange(4.0)
    assert report.status("a", "nll") == report.status("b", "tails") == "flows"
    assert report.status("a", "tails") != "flows"
    rtol = 1e-6 if dtype == "float32" else 1e-14
    np.testing.assert_allclose(report.grad("a", "nll"), digamma(a) - np.log(y + 0.5) + trigamma(a) * 0.5, rtol=rtol)
    np.testing.assert_allclose(report.grad("b", "tails"), y * math.sqrt(math.pi) / 2 * np.exp(erfinv(b) ** 2),
                               rtol=rtol)
    assert report.grad("a", "nll").dtype == np.dtype(dtype)


def test_special_functions_record_their_shapes_lazily():
    tape = Tape(eager=False)
    x, y = tape.leaf(shape=(3, 4)), tape.leaf(shape=(1, 4), dtype=np.int64)
    assert [tape.apply(name, x).shape for name in ("lgamma", "digamma", "erfinv")] == [(3, 4)] * 3
    assert tape.apply("xlogy", y, x).shape == (3, 4) and tape.apply("xlogy", y, y).dtype == np.float64
