"""floor_divide, trunc_divide and sign against PyTorch as the oracle, bit for bit: quotients
that are whole but for a rounding (torch.tensor(1.0) // 0.1 is 9.0), signed zeros, infinities,
NaN and divisors of 0, in float64 and in float32 as torch computes them there; integers of
either sign (int64 results, an integer divisor of 0 refused as torch refuses it); torch's
gradient of a rounding division is 0, gradflow's none."""

from __future__ import annotations

import numpy as np
import pytest

from gradflow.engine import Tape
from test_rounding_division import BEYOND, NEAR_WHOLE, SIGNS  # pytest puts this directory on sys.path

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

INF, NAN = np.inf, np.nan
BY_ZERO = [(3.0, 0.0), (-3.0, 0.0), (0.0, 0.0), (3.0, -0.0), (-0.0, -0.0), (INF, 0.0), (NAN, 0.0)]
TORCH = {"floor_divide": lambda a, b: torch.div(a, b, rounding_mode="floor"),
         "trunc_divide": lambda a, b: torch.div(a, b, rounding_mode="trunc")}


def operands(dtype):
    """The corners, and many tenths and random numbers by tenths and by numbers near 1."""
    rng = np.random.default_rng(1)
    a, b = (list(v) for v in zip(*NEAR_WHOLE, *SIGNS, *BEYOND, *BY_ZERO))
    a += (rng.integers(-300, 300, 3000) * 0.1).tolist() + (rng.normal(size=3000) * 30).tolist()
    b += rng.choice([0.1, -0.1, 0.2, 0.3, -0.7, 3.0, 1e-3], size=6000).tolist()
    with np.errstate(over="ignore"):   # 1e308 is inf in float32
        return np.array(a, dtype=dtype), np.array(b, dtype=dtype)


def tape_value(name, *arrays, dtype=np.float64):
    tape = Tape(dtype)
    with np.errstate(all="ignore"):
        return tape.apply(name, *[tape.leaf(a) for a in arrays]).value


def assert_same_bits(ours, theirs):
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)
    numbers = ~np.isnan(theirs)
    assert np.array_equal(np.signbit(ours[numbers]), np.signbit(theirs[numbers]))   # -0.0 where torch's is


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", ["floor_divide", "trunc_divide"])
def test_float_rounding_divisions_are_torchs_bit_for_bit(name, dtype):
    a, b = operands(dtype)
    ours = tape_value(name, a, b, dtype=dtype)
    assert_same_bits(ours, TORCH[name](torch.tensor(a), torch.tensor(b)).numpy())
    if name == "floor_divide":
        assert_same_bits(ours, torch.floor_divide(torch.tensor(a), torch.tensor(b)).numpy())
        assert_same_bits(ours, (torch.tensor(a) // torch.tensor(b)).numpy())
        with np.errstate(all="ignore"):
            assert (np.floor(a / b) != ours).sum() > 100   # where the floor of the quotient is not torch's


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("number", [0.1, -0.3, 0.7, 3.0, 0.0, -0.0])
def test_a_float_tensor_by_a_number_is_torchs(number, dtype):
    """torch divides by the number in the tensor's dtype, as gradflow's constants are."""
    a, _ = operands(dtype)
    for name, fn in TORCH.items():
        assert_same_bits(tape_value(name, a, np.array(number, dtype), dtype=dtype), fn(torch.tensor(a), number).numpy())
    assert_same_bits(tape_value("floor_divide", a, np.array(number, dtype), dtype=dtype),
                     (torch.tensor(a) // number).numpy())


def test_torch_1_floor_divided_by_a_tenth_is_9_and_so_is_gradflows():
    for dtype in (np.float64, np.float32):
        assert (torch.tensor(1.0, dtype=torch.float64 if dtype is np.float64 else torch.float32) // 0.1).item() == 9.0
        assert tape_value("floor_divide", np.array(1.0, dtype), np.array(0.1, dtype), dtype=dtype) == 9.0


@pytest.mark.parametrize("name", ["floor_divide", "trunc_divide"])
def test_integer_rounding_divisions_are_torchs(name):
    rng = np.random.default_rng(2)
    a = np.concatenate([np.arange(-20, 21), rng.integers(-2 ** 62, 2 ** 62, size=200)])
    for b in (rng.choice([-7, -3, -2, -1, 1, 2, 5, 1000003], size=a.size), np.array(3), np.array(-2)):
        ours = tape_value(name, a, b)
        assert ours.dtype == np.int64
        np.testing.assert_array_equal(ours, TORCH[name](torch.tensor(a), torch.tensor(b)).numpy())
    mixed = tape_value(name, a[:41], np.array(2.5))       # an integer by a float: a float, as torch's
    np.testing.assert_array_equal(mixed, TORCH[name](torch.tensor(a[:41]), 2.5).double().numpy())


@pytest.mark.parametrize("name", ["floor_divide", "trunc_divide"])
def test_an_integer_divided_by_zero_is_refused_as_torch_refuses_it(name):
    a, b = np.array([3, -4, 5]), np.array([1, 0, 2])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        TORCH[name](torch.tensor(a), torch.tensor(b))
    with pytest.raises(ZeroDivisionError, match="of an integer tensor by 0 .torch raises ZeroDivisionError."):
        tape_value(name, a, b)


def test_sign_and_sgn_of_integers_are_torchs_integers():
    x = np.arange(-5, 6)
    for fn in (torch.sign, torch.sgn):
        theirs = fn(torch.tensor(x)).numpy()
        assert theirs.dtype == np.int64
        np.testing.assert_array_equal(tape_value("sign", x), theirs)
        assert tape_value("sign", x).dtype == np.int64


@pytest.mark.parametrize("name", ["floor_divide", "trunc_divide"])
def test_torch_gives_a_rounding_division_a_zero_gradient_or_none_gradflow_cuts_it(name):
    a = torch.tensor([1.5, -2.5], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([0.7, 0.3], dtype=torch.float64, requires_grad=True)
    grads = torch.autograd.grad((TORCH[name](a, b) * a).sum(), [a, b])
    np.testing.assert_array_equal(grads[0].numpy(), torch.div(a, b, rounding_mode=name[:5]).detach().numpy())
    assert not grads[1].any()
    with pytest.raises(RuntimeError, match="derivative for aten::floor_divide is not implemented"):
        torch.autograd.grad(torch.floor_divide(a, b).sum(), [a])
    tape = Tape()
    x, y = tape.param(a.detach().numpy()), tape.param(b.detach().numpy())
    got = tape.backward(tape.apply("sum", tape.apply(name, x, y) * x))
    np.testing.assert_array_equal(got[x.index], grads[0].numpy())
    assert got[y.index] is None
