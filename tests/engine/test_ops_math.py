"""atan2, acos, asin, atan, remainder, fmod, prod and searchsorted at their corners, against
PyTorch as the oracle: atan2 at the origin, at signed zeros and at infinities; acos and asin at
+-1 (infinite gradients) and beyond (NaN); remainder and fmod with negative operands, infinities
and a zero divisor; prod with one zero, two zeros and an infinity beside a zero; searchsorted
on ties, infinities and NaN; and each in float32 as torch computes it in float32."""

from __future__ import annotations

import numpy as np
import pytest

from gradflow.engine import Tape
from test_corners import tape_grads, torch_grads  # pytest puts this directory on sys.path

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

INF, NAN = np.inf, np.nan
DIVIDENDS = [5.5, -5.5, 5.5, -5.5, 0.0, 3.0, -0.0, 1.0, INF, 1.0, -1.0, 6.0, -6.0, 1e-300]
DIVISORS = [2.0, 2.0, -2.0, -2.0, 2.0, 0.0, 0.0, INF, 2.0, -INF, INF, 3.0, 3.0, -1.0]


def torch_prod(x, axis=None, keepdims=False):
    return torch.prod(x) if axis is None else torch.prod(x, axis, keepdim=keepdims)


# (op, torch function, inputs, attrs, upstream gradient)
CORNERS = {
    # torch's 1 / (y ** 2 + x ** 2) is set to 0 where it is infinite: both gradients are 0 at the
    # origin (and where both squares underflow), NaN where an infinity meets that 0
    "atan2-origin": ("atan2", torch.atan2, [[0.0, -0.0, 0.0, -0.0, 1e-200, -1e-170],
                                            [0.0, 0.0, -0.0, -0.0, 1e-200, 1e-170]], {}, [1.0] * 6),
    "atan2-origin-inf-upstream": ("atan2", torch.atan2, [[0.0, -0.0, 1.0], [0.0, -0.0, 2.0]], {}, [INF] * 3),
    "atan2-infinities": ("atan2", torch.atan2, [[INF, INF, -INF, 1.0, 1.0, INF, NAN, -INF, 0.0],
                                                [INF, -INF, 1.0, INF, -INF, 1.0, 1.0, -INF, NAN]], {}, [1.0] * 9),
    "atan2-axes": ("atan2", torch.atan2, [[0.0, 0.0, 2.0, -2.0, 1e300], [3.0, -3.0, 0.0, 0.0, 1e300]], {},
                   [1.0, 2.0, 3.0, 4.0, 5.0]),
    # 1 / sqrt(1 - x * x): inf at +-1, NaN beyond (and 0 * inf = NaN for a zero upstream there)
    "acos-edges": ("acos", torch.acos, [[-1.0, 1.0, -1.5, 1.5, 0.0, -0.0, NAN, 0.5, -1e-300]], {}, [1.0] * 9),
    "acos-edges-zero-upstream": ("acos", torch.acos, [[-1.0, 1.0, 0.5]], {}, [0.0, 0.0, INF]),
    "asin-edges": ("asin", torch.asin, [[-1.0, 1.0, -1.5, 1.5, 0.0, NAN, -0.5, 1 - 1e-16]], {}, [1.0] * 8),
    "asin-edges-zero-upstream": ("asin", torch.asin, [[-1.0, 1.0, -0.5]], {}, [0.0, 0.0, -INF]),
    "atan-infinities": ("atan", torch.atan, [[-INF, INF, 0.0, 1e300, -1e160, NAN, 1e-300]], {}, [1.0] * 7),
    # remainder takes the divisor's sign, fmod the dividend's; the divisor's gradient is
    # -floor(a / b) or -trunc(a / b): -inf or NaN at a zero divisor, whose value is NaN
    "remainder-signs-zero-infinities": ("remainder", torch.remainder, [DIVIDENDS, DIVISORS], {},
                                        [1.0] * len(DIVIDENDS)),
    "fmod-signs-zero-infinities": ("fmod", torch.fmod, [DIVIDENDS, DIVISORS], {}, [1.0] * len(DIVIDENDS)),
    "remainder-inf-upstream": ("remainder", torch.remainder, [[5.5, 4.0, 0.5], [2.0, 2.0, 2.0]], {}, [INF] * 3),
    # prod: without zeros g * result / x; with one, the product of the others; torch.prod(x) of
    # two or more zeros: 0 everywhere, infinities or not
    "prod-one-zero": ("prod", torch_prod, [[2.0, 0.0, -3.0, 0.5]], {}, 1.0),
    "prod-two-zeros": ("prod", torch_prod, [[[2.0, 0.0, 3.0], [0.0, INF, 1.0]]], {}, 1.0),
    "prod-zero-beside-inf": ("prod", torch_prod, [[2.0, INF, 0.0]], {}, 1.0),
    "prod-nan": ("prod", torch_prod, [[2.0, NAN, 3.0]], {}, 1.0),
    "prod-no-zero-inf-upstream": ("prod", torch_prod, [[2.0, -4.0, 0.5]], {}, INF),
    "prod-rows-zeros": ("prod", torch_prod, [[[2.0, 0.0, 3.0, 0.0], [0.0, 0.5, -1.0, 2.0], [1.5, 2.0, -0.5, 4.0],
                                              [0.0, INF, 1.0, 2.0], [NAN, 0.0, 1.0, 1.0]]], {"axis": 1},
                        [1.0, 2.0, 3.0, 4.0, 5.0]),
    "prod-columns-keep": ("prod", torch_prod, [[[2.0, 0.0], [0.0, 0.0], [-3.0, 4.0]]], {"axis": 0, "keepdims": True},
                          [[1.0, -2.0]]),
    "prod-0d": ("prod", torch_prod, [INF], {}, 2.0),
}


def torch_value(fn, arrays, attrs):
    return fn(*[torch.tensor(a) for a in arrays], **attrs).numpy()


def tape_value(name, arrays, attrs):
    tape = Tape()
    with np.errstate(all="ignore"):   # NaN from arccos(1.5), fmod(3, 0)
        return tape.apply(name, *[tape.leaf(np.asarray(a)) for a in arrays], **attrs).value


@pytest.mark.parametrize("corner", list(CORNERS))
def test_math_op_values_and_gradients_at_corners_match_torch(corner):
    name, fn, arrays, attrs, upstream = CORNERS[corner]
    arrays = [np.asarray(a, dtype=float) for a in arrays]
    np.testing.assert_allclose(tape_value(name, arrays, attrs), torch_value(fn, arrays, attrs), rtol=1e-15, atol=0)
    for k, (mine, theirs) in enumerate(zip(tape_grads(name, arrays, attrs, upstream),
                                           torch_grads(fn, arrays, attrs, upstream))):
        np.testing.assert_array_equal(mine, theirs, err_msg=f"input {k}")   # NaN == NaN, inf == inf here


def test_atan2_at_signed_zeros_gives_torchs_angles_and_signed_zero_gradients():
    y, x = np.array([0.0, -0.0, 0.0, -0.0]), np.array([0.0, 0.0, -0.0, -0.0])
    np.testing.assert_array_equal(tape_value("atan2", [y, x], {}), [0.0, -0.0, np.pi, -np.pi])
    assert np.signbit(tape_value("atan2", [y, x], {})).tolist() == [False, True, False, True]
    mine, theirs = tape_grads("atan2", [y, x], {}, [1.0] * 4), torch_grads(torch.atan2, [y, x], {}, [1.0] * 4)
    for ours, torchs in zip(mine, theirs):
        assert not ours.any() and np.signbit(ours).tolist() == np.signbit(torchs).tolist()


@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("boundaries, x", [
    ([1.0, 2.0, 2.0, 3.0], [0.5, 1.0, 2.0, 2.5, 3.0, 3.5, NAN, -INF, INF]),           # ties, on and off the edges
    ([1.0, NAN, 3.0], [0.5, 1.0, 2.0, 3.0, 4.0, NAN]),                                # a NaN boundary
    ([-INF, 0.0, INF], [-INF, -1.0, 0.0, 1.0, INF]),
    ([2.0], [1.0, 2.0, 3.0]), ([], [1.0, 2.0]),
    ([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]], [[2.0, 2.5], [2.0, 6.0]]),                    # one row of boundaries each
    ([1.0, 2.0, 3.0], 2.0),
], ids=["ties", "nan-boundary", "infinities", "one", "empty", "rows", "0-d"])
def test_searchsorted_and_bucketize_give_torchs_indices(boundaries, x, right):
    boundaries, x = np.asarray(boundaries), np.asarray(x)
    ours = tape_value("searchsorted", [boundaries, x], {"right": right})
    assert ours.dtype == np.int64
    theirs = torch.searchsorted(torch.tensor(boundaries), torch.tensor(x), right=right).numpy()
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(ours, torch.searchsorted(torch.tensor(boundaries), torch.tensor(x),
                                                           side="right" if right else "left").numpy())
    if boundaries.ndim == 1:
        np.testing.assert_array_equal(ours, torch.bucketize(torch.tensor(x), torch.tensor(boundaries), right=right))


FLOAT32 = ["atan2-origin", "atan2-infinities", "atan2-axes", "acos-edges", "asin-edges", "atan-infinities",
           "remainder-signs-zero-infinities", "fmod-signs-zero-infinities", "prod-one-zero", "prod-rows-zeros"]


@pytest.mark.parametrize("corner", FLOAT32)
def test_math_ops_in_float32_stay_float32_and_match_torchs_float32(corner):
    name, fn, arrays, attrs, upstream = CORNERS[corner]
    with np.errstate(all="ignore"):   # 1e300 is inf in float32
        arrays = [np.asarray(a, dtype=np.float32) for a in arrays]
        tape = Tape(np.float32)
        inputs = [tape.param(a) for a in arrays]
        out = tape.apply(name, *inputs, **attrs)
        grads = tape.backward(tape.apply("sum", out * tape.constant(np.asarray(upstream, dtype=np.float32))))
    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    theirs = fn(*tensors, **attrs)
    theirs.backward(torch.as_tensor(np.asarray(upstream, dtype=np.float32)).reshape(theirs.shape))
    assert out.value.dtype == np.float32 and all(grads[x.index].dtype == np.float32 for x in inputs)
    np.testing.assert_allclose(out.value, theirs.detach().numpy(), rtol=1e-6, atol=0)
    for x, t in zip(inputs, tensors):
        np.testing.assert_allclose(grads[x.index], t.grad.numpy(), rtol=1e-6, atol=0)
