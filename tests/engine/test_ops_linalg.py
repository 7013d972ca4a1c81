"""inv, det, logabsdet, det_sign, logdet, solve, cholesky and solve_triangular at their corners:
values against numpy's, what torch raises for (a singular matrix, one that is not positive-definite,
an integer tensor) as errors that say why, shapes torch refuses, the determinants and their
gradients at singular matrices, the triangle a triangular solve reads, float32 kept; and, where
torch is installed, the gradients torch gives there."""

from __future__ import annotations

import numpy as np
import pytest

from gradflow.engine import Tape
from gradflow.errors import ShapeError

RNG = np.random.default_rng(3)
A = RNG.normal(size=(3, 3)) + 3 * np.eye(3)
SPD = A @ A.T + np.eye(3)
RANK_2 = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])    # 3x3 of rank n - 1
RANK_1 = np.outer([1.0, 2.0, -1.0], [2.0, 0.5, 1.0])                     # 3x3 of rank n - 2
HOLED = np.array([[1.0, 2.0, 0.0], [3.0, 4.0, 0.0], [0.0, 0.0, np.nan]])  # a NaN apart from the rest


def run(name, *arrays, dtype=np.float64, weights=None, **attrs):
    """(value, [gradient per input]) of sum(weights * op(*arrays)) on a tape of dtype."""
    tape = Tape(dtype)
    inputs = [tape.param(a) for a in arrays]
    out = tape.apply(name, *inputs, **attrs)
    seed = np.ones(out.shape) if weights is None else weights
    grads = tape.backward(tape.apply("sum", out * tape.constant(seed)))
    return out.value, [grads[x.index] for x in inputs]


def lazy_shape(name, *shapes, **attrs):
    tape = Tape(eager=False)
    return tape.apply(name, *[tape.leaf(shape=s) for s in shapes], **attrs).shape


# ---------------------------------------------------------------- values
def test_values_are_numpy_linalg_batched_over_leading_axes():
    batch = np.stack([A, SPD, -A])
    b = RNG.normal(size=(3, 3, 2))
    np.testing.assert_allclose(run("inv", batch)[0], np.linalg.inv(batch))
    np.testing.assert_allclose(run("det", batch)[0], np.linalg.det(batch))
    sign, logabs = np.linalg.slogdet(batch)
    np.testing.assert_array_equal(run("det_sign", batch)[0], sign)
    np.testing.assert_allclose(run("logabsdet", batch)[0], logabs)
    np.testing.assert_allclose(run("solve", batch, b)[0], np.linalg.solve(batch, b))
    np.testing.assert_allclose(run("cholesky", SPD)[0], np.linalg.cholesky(SPD))
    np.testing.assert_allclose(run("cholesky", SPD, upper=True)[0], np.linalg.cholesky(SPD).T)
    low = np.tril(A)
    np.testing.assert_allclose(run("solve_triangular", A, b, upper=False)[0], np.linalg.solve(low, b))
    np.testing.assert_allclose(run("solve_triangular", A, np.swapaxes(b, -1, -2), upper=True, left=False)[0],
                               np.swapaxes(np.linalg.solve(np.triu(A).T, b), -1, -2))


def test_solve_takes_b_as_a_vector_as_torch_decides():
    """A vector if it has one axis, or a's sizes but the last; [..., n, k] otherwise."""
    a = np.stack([A, SPD])
    assert lazy_shape("solve", (2, 3, 3), (3,)) == (2, 3)
    assert lazy_shape("solve", (2, 3, 3), (2, 3)) == (2, 3)
    assert lazy_shape("solve", (2, 3, 3), (3, 3)) == (2, 3, 3)
    assert lazy_shape("solve", (3, 3), (4, 3, 1)) == (4, 3, 1)
    v = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(run("solve", a, v)[0], np.stack([np.linalg.solve(m, v) for m in a]))
    rows = RNG.normal(size=(2, 3))
    np.testing.assert_allclose(run("solve", a, rows)[0], np.stack([np.linalg.solve(m, r) for m, r in zip(a, rows)]))


def test_logdet_is_nan_for_a_negative_determinant_and_minus_inf_for_a_zero_one():
    flipped = A * np.array([[-1.0], [1.0], [1.0]])
    value, (g,) = run("logdet", np.stack([A, flipped, RANK_2]))
    assert np.isnan(value[1]) and value[2] == -np.inf
    np.testing.assert_allclose(value[0], np.log(np.linalg.det(A)))
    np.testing.assert_allclose(g[0], np.linalg.inv(A).T)
    np.testing.assert_array_equal(g[1], np.zeros((3, 3)))    # torch's where passes none to the NaN
    assert np.isnan(g[2]).all()
    value, (g,) = run("logabsdet", flipped)
    np.testing.assert_allclose(value, np.log(-np.linalg.det(flipped)))
    np.testing.assert_allclose(g, np.linalg.inv(flipped).T)
    assert run("det_sign", flipped)[0] == -1.0 and run("det_sign", RANK_2)[0] == 0.0


# ---------------------------------------------------------------- singular matrices
@pytest.mark.parametrize("x", [RANK_2, RANK_1, np.zeros((3, 3)), np.eye(3) * 1e-120], ids=["rank-2", "rank-1",
                                                                                          "zeros", "underflow"])
def test_det_of_a_singular_matrix_is_0_with_torch_s_zero_gradient(x):
    """torch solves for det's gradient with g det(x) on the right: 0 where det(x) is 0, though the
    adjugate of a rank n - 1 matrix is not 0."""
    value, (g,) = run("det", x)
    assert value == 0.0
    np.testing.assert_array_equal(g, np.zeros((3, 3)))


def cofactors(x):
    """Each entry's signed minor: det's gradient, the adjugate transposed."""
    n = len(x)
    return np.array([[(-1) ** (i + j) * np.linalg.det(np.delete(np.delete(x, i, 0), j, 1)) for j in range(n)]
                     for i in range(n)])


def test_det_gradient_near_a_singular_matrix_is_its_cofactors():
    near = RANK_2 + np.diag([1e-9, 0.0, 0.0])
    assert np.linalg.det(near) != 0 and cofactors(RANK_2).any()
    np.testing.assert_allclose(run("det", near)[1][0], cofactors(RANK_2), atol=1e-6)


def test_logabsdet_of_a_singular_matrix_is_minus_inf_with_a_nan_gradient():
    value, (g,) = run("logabsdet", np.stack([RANK_2, A]))
    assert value[0] == -np.inf and np.isnan(g[0]).all()
    np.testing.assert_allclose(g[1], np.linalg.inv(A).T)


@pytest.mark.parametrize("name, args, message", [
    ("inv", [RANK_2], "inv of a singular matrix (torch raises LinAlgError)"),
    ("inv", [np.stack([A, RANK_1])], "inv of a singular matrix at batch element 1 (torch raises LinAlgError)"),
    ("solve", [np.stack([RANK_2, A]), np.ones(3)],
     "solve with a singular matrix a at batch element 0 (torch raises LinAlgError)"),
    ("cholesky", [np.diag([1.0, 2.0, -1.0])],
     "cholesky of a matrix that is not positive-definite: its leading minor of order 3 is not "
     "(torch raises LinAlgError)"),
    ("cholesky", [np.stack([[SPD, SPD], [SPD, -SPD]])],
     "cholesky of a matrix that is not positive-definite at batch element 3: its leading minor of order 1 is not "
     "(torch raises LinAlgError)"),
    ("cholesky", [np.array([[1.0, 0.0], [0.0, np.nan]])],    # numpy's OpenBLAS passes a NaN; torch stops at it
     "cholesky of a matrix that is not positive-definite: its leading minor of order 2 is not "
     "(torch raises LinAlgError)"),
])
def test_what_torch_raises_for_is_an_error_that_says_why(name, args, message):
    with pytest.raises(np.linalg.LinAlgError) as caught:
        run(name, *args)
    assert str(caught.value) == message and isinstance(caught.value, ValueError)


@pytest.mark.parametrize("name", ["inv", "det", "logabsdet", "det_sign", "logdet", "cholesky"])
def test_an_integer_matrix_is_refused_as_torch_refuses_it(name):
    tape = Tape()
    with pytest.raises(TypeError, match=f"^{name} of an integer tensor"):
        tape.apply(name, tape.leaf(np.eye(3, dtype=np.int64)))
    with pytest.raises(TypeError, match="^solve of an integer tensor"):
        tape.apply("solve", tape.leaf(np.eye(3)), tape.leaf(np.ones(3, dtype=np.int64)))


# ---------------------------------------------------------------- triangles
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular_reads_one_triangle_and_gives_the_rest_no_gradient(upper, unit):
    b, weights = RNG.normal(size=(3, 2)), RNG.normal(size=(3, 2))
    other = np.tril(np.ones((3, 3)), -1) if upper else np.triu(np.ones((3, 3)), 1)
    unread = other + (np.eye(3) if unit else 0)
    attrs = {"upper": upper, "unitriangular": unit}
    value, (ga, gb) = run("solve_triangular", A, b, weights=weights, **attrs)
    changed, _ = run("solve_triangular", A + 7.0 * unread, b, **attrs)
    np.testing.assert_array_equal(value, changed)
    t = (np.triu(A) if upper else np.tril(A)) * (1 - unread) + (np.eye(3) if unit else 0)
    np.testing.assert_allclose(value, np.linalg.solve(t, b))
    np.testing.assert_array_equal(ga[unread == 1], 0.0)
    np.testing.assert_allclose(gb, np.linalg.solve(t.T, weights))
    np.testing.assert_allclose(ga[unread == 0], -(np.linalg.solve(t.T, weights) @ value.T)[unread == 0])


def test_solve_triangular_with_a_zero_on_the_diagonal_gives_inf_and_nan_as_torch():
    low = np.array([[0.0, 0.0], [1.0, 1.0]])
    with np.errstate(divide="ignore", invalid="ignore"):
        value, _ = run("solve_triangular", low, np.array([[1.0, 0.0], [2.0, 2.0]]), upper=False)
    np.testing.assert_array_equal(value, [[np.inf, np.nan], [-np.inf, np.nan]])   # 1 / 0, then 0 / 0


def test_cholesky_gradient_is_symmetric_and_the_derivative_of_its_symmetric_part():
    """torch's gradient is symmetric; gradflow's forward reads (x + x^T) / 2, whose derivative it is:
    a nudge of x[i, j] moves the value as half a nudge of both x[i, j] and x[j, i] would."""
    weights = RNG.normal(size=(3, 3))
    for upper in (False, True):
        _, (g,) = run("cholesky", SPD, weights=weights, upper=upper)
        np.testing.assert_allclose(g, g.T)
        nudged = SPD.copy()
        nudged[2, 0] += 1e-6
        up, down = (np.sum(weights * run("cholesky", x, upper=upper)[0]) for x in (nudged, SPD))
        assert (up - down) / 1e-6 == pytest.approx(g[2, 0], rel=1e-4)
    np.testing.assert_array_equal(run("cholesky", SPD)[0], run("cholesky", np.tril(SPD) + np.tril(SPD, -1).T)[0])


# ---------------------------------------------------------------- shapes and dtypes
@pytest.mark.parametrize("name, shapes, attrs, message", [
    ("inv", [(3,)], {}, "inv: needs square matrices [..., n, n], got [3]"),
    ("det", [(2, 3, 4)], {}, "det: needs square matrices [..., n, n], got [2, 3, 4]"),
    ("cholesky", [(3, 3)], {"upper": 1}, "cholesky: upper must be True or False, not 1"),
    ("solve", [(3, 3), (2, 3)], {}, "solve: a [3, 3] and b [2, 3]: b needs 3 rows ([..., 3, k]), or to be a vector "
                                    "of 3 entries"),
    ("solve", [(3, 3), (4,)], {}, "solve: a [3, 3] and the vector b [4]: b needs 3 entries"),
    ("solve", [(2, 3, 3), (4, 3, 1)], {}, "solve: cannot broadcast [2] and [4]"),
    ("solve_triangular", [(3, 3), (3,)], {"upper": True}, "solve_triangular: a [3, 3] and b [3]: b needs to be "
                                                          "[..., 3, k]"),
    ("solve_triangular", [(3, 3), (3, 2)], {"upper": True, "left": False},
     "solve_triangular: a [3, 3] and b [3, 2]: b needs to be [..., k, 3] (left=False)"),
    ("solve_triangular", [(3, 3), (3, 2)], {"upper": "yes"},
     "solve_triangular: upper must be True or False, not the string 'yes'"),
])
def test_shapes_torch_refuses_are_shape_errors(name, shapes, attrs, message):
    with pytest.raises(ShapeError) as caught:
        lazy_shape(name, *shapes, **attrs)
    assert str(caught.value) == message


@pytest.mark.parametrize("name, args, attrs", [
    ("inv", [A], {}), ("det", [A], {}), ("logabsdet", [A], {}), ("logdet", [SPD], {}), ("cholesky", [SPD], {}),
    ("solve", [A, np.ones(3)], {}), ("solve_triangular", [A, np.ones((3, 2))], {"upper": True, "left": True}),
])
def test_float32_stays_float32_close_to_float64(name, args, attrs):
    value32, grads32 = run(name, *args, dtype=np.float32, **attrs)
    value64, grads64 = run(name, *args, **attrs)
    assert value32.dtype == np.float32 and all(g.dtype == np.float32 for g in grads32)
    np.testing.assert_allclose(value32, value64, rtol=1e-5)
    for g32, g64 in zip(grads32, grads64):
        np.testing.assert_allclose(g32, g64, rtol=1e-4, atol=1e-6)


def test_empty_matrices_as_torch():
    """A 0x0 matrix: its determinant is 1 (the empty product), its inverse and factor empty."""
    assert run("det", np.zeros((2, 0, 0)))[0].tolist() == [1.0, 1.0]
    assert run("inv", np.zeros((0, 0)))[0].shape == run("cholesky", np.zeros((0, 0)))[0].shape == (0, 0)


def invertible(x) -> bool:
    return np.isnan(x).any() or np.linalg.det(x) != 0


def test_a_matrix_holding_a_nan_gives_nan_throughout_as_torch():
    """torch's inverse, determinant and solve of it are NaN everywhere (its sign 0); numpy's OpenBLAS
    would keep the entries the NaN does not reach, or raise, taking it for a zero pivot."""
    batch = np.stack([HOLED, A])
    with np.errstate(invalid="ignore"):
        inverse, (g,) = run("inv", batch)
        assert np.isnan(inverse[0]).all() and np.isnan(g[0]).all()
        np.testing.assert_allclose(inverse[1], np.linalg.inv(A))
        for name in ("det", "logabsdet", "logdet"):
            value, (g,) = run(name, batch)
            assert np.isnan(value[0]) and not np.isnan(value[1]) and np.isnan(g[0]).all() and not np.isnan(g[1]).any()
        assert run("det_sign", batch)[0].tolist() == [0.0, 1.0]
        x, (ga, gb) = run("solve", batch, np.ones(3))
        assert np.isnan(x[0]).all() and np.isnan(ga[0]).all() and not np.isnan(x[1]).any()


# ---------------------------------------------------------------- torch at the singular corners
@pytest.mark.torch
@pytest.mark.parametrize("x", [RANK_2, RANK_1, np.zeros((3, 3)), A * np.array([[-1.0], [1.0], [1.0]]), HOLED],
                         ids=["rank-2", "rank-1", "zeros", "negative", "nan"])
def test_determinant_and_inverse_gradients_at_singular_negative_and_nan_matrices_are_torch_s(x):
    torch = pytest.importorskip("torch")
    calls = [("det", torch.linalg.det), ("logdet", torch.logdet), ("logabsdet", lambda t: torch.linalg.slogdet(t)[1])]
    for name, fn in calls + ([("inv", lambda t: torch.linalg.inv(t).sum())] if invertible(x) else []):
        t = torch.tensor(x, requires_grad=True)
        value = fn(t)
        value.backward()
        ours, (g,) = run(name, x)
        np.testing.assert_allclose(np.sum(ours), value.item(), rtol=1e-12)
        if np.isfinite(t.grad.numpy()).all():
            np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-12, atol=1e-300)
        else:   # torch's solve with a zero pivot leaves inf and NaN; gradflow's is NaN
            assert not np.isfinite(g).any()
