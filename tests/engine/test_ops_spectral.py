"""eigvalsh, eigvecsh, svdvals, svd_u, svd_vh, qr_q, qr_r, matrix_exp and the _ex forms at their
corners: values against numpy's and what they mean (x v = v l, u s vh = x, q r = x, ascending and
descending order, the vectors' sign), the symmetric part eigh reads, repeated eigenvalues and
singular values (inf and NaN where the vectors' gradient divides by a 0 gap, finite values'
gradients), full_matrices' extra columns, rank-deficient QR, NaN and inf as errors that say why,
shapes and dtypes torch refuses, float32 kept; and, where torch is installed, torch's values up to
the vectors' sign and its gradients for losses that do not depend on that sign."""

from __future__ import annotations

import numpy as np
import pytest

from gradflow.engine import Tape
from gradflow.errors import ShapeError

RNG = np.random.default_rng(5)
A = RNG.normal(size=(4, 4))
SYM = A + A.T
TALL, WIDE = RNG.normal(size=(5, 3)), RNG.normal(size=(2, 4))
REPEATED = np.diag([2.0, 2.0, 1.0])                     # a repeated eigenvalue and singular value
W3 = np.arange(1.0, 10.0).reshape(3, 3)


def run(name, *arrays, dtype=np.float64, weights=None, squared=False, **attrs):
    """(value, [gradient per input]) of sum(weights * op(*arrays)) (squared: of op(*arrays) ** 2,
    which no vector's sign changes) on a tape of dtype."""
    tape = Tape(dtype)
    inputs = [tape.param(a) for a in arrays]
    out = tape.apply(name, *inputs, **attrs)
    seed = np.ones(out.shape) if weights is None else weights
    term = out * out if squared else out
    grads = tape.backward(tape.apply("sum", term * tape.constant(seed)))
    return out.value, [grads[x.index] for x in inputs]


def lazy_shape(name, *shapes, **attrs):
    tape = Tape(eager=False)
    return tape.apply(name, *[tape.leaf(shape=s) for s in shapes], **attrs).shape


def largest_positive(v) -> bool:
    big = np.take_along_axis(v, np.argmax(np.abs(v), axis=-2)[..., None, :], axis=-2)
    return bool((big > 0).all())


# ---------------------------------------------------------------- values
def test_eigh_gives_ascending_eigenvalues_and_orthonormal_eigenvectors_of_x():
    batch = np.stack([SYM, np.diag([3.0, -1.0, 2.0, 0.5])])
    values, vectors = run("eigvalsh", batch)[0], run("eigvecsh", batch)[0]
    np.testing.assert_allclose(values, np.linalg.eigvalsh(batch))
    assert (np.diff(values, axis=-1) > 0).all()
    np.testing.assert_allclose(batch @ vectors, vectors * values[..., None, :], atol=1e-12)
    np.testing.assert_allclose(np.swapaxes(vectors, -1, -2) @ vectors, np.broadcast_to(np.eye(4), (2, 4, 4)),
                               atol=1e-12)
    assert largest_positive(vectors)


def test_eigh_reads_the_symmetric_part_whose_derivative_torch_s_gradient_is():
    """torch reads one triangle; gradflow (x + x^T) / 2, the same for a symmetric x: a nudge of
    x[i, j] moves the value as half a nudge of both x[i, j] and x[j, i] would."""
    np.testing.assert_allclose(run("eigvalsh", A)[0], np.linalg.eigvalsh((A + A.T) / 2))
    weights = RNG.normal(size=(4, 4))
    for name, w in (("eigvalsh", weights[0]), ("eigvecsh", weights)):
        _, (g,) = run(name, SYM, weights=w)
        np.testing.assert_allclose(g, g.T, atol=1e-12)
        nudged = SYM.copy()
        nudged[3, 1] += 1e-6
        up, down = (np.sum(w * run(name, x)[0]) for x in (nudged, SYM))
        assert (up - down) / 1e-6 == pytest.approx(g[3, 1], rel=1e-4)


@pytest.mark.parametrize("x", [TALL, WIDE, A, np.stack([TALL[:4], A[:, :3]])], ids=["tall", "wide", "square", "batch"])
def test_svd_factors_rebuild_x_with_descending_singular_values_and_signed_vectors(x):
    u, s, vh = (run(name, x)[0] for name in ("svd_u", "svdvals", "svd_vh"))
    np.testing.assert_allclose(s, np.linalg.svd(x, compute_uv=False))
    assert (np.diff(s, axis=-1) < 0).all()
    np.testing.assert_allclose((u * s[..., None, :]) @ vh, x, atol=1e-12)
    assert largest_positive(u)


def test_full_matrices_adds_a_basis_of_the_rest_which_gets_no_gradient_as_in_torch():
    """torch narrows u (vh) and its gradient to the first min(m, n) columns (rows): the extra ones,
    any basis of what is left, get none, and the op says its rule is not the derivative there."""
    weights = RNG.normal(size=(5, 5))
    u, (g,) = run("svd_u", TALL, weights=weights, full_matrices=True)
    np.testing.assert_allclose(u.T @ u, np.eye(5), atol=1e-12)
    _, (narrow,) = run("svd_u", TALL, weights=weights[:, :3])
    np.testing.assert_allclose(g, narrow, rtol=1e-12)
    vh, (g,) = run("svd_vh", WIDE, weights=weights[:4, :4], full_matrices=True)
    assert vh.shape == (4, 4) and np.allclose(vh @ vh.T, np.eye(4))
    np.testing.assert_allclose(g, run("svd_vh", WIDE, weights=weights[:2, :4])[1][0], rtol=1e-12)
    from gradflow.engine import OPS
    assert not OPS["svd_u"].derives({"full_matrices": True}) and OPS["svd_vh"].derives({"full_matrices": False})


@pytest.mark.parametrize("x", [TALL, WIDE, A, np.stack([WIDE, WIDE * 2])], ids=["tall", "wide", "square", "batch"])
def test_qr_factors_rebuild_x_as_lapack_s_householder_reflections_give_them(x):
    q, r = run("qr_q", x)[0], run("qr_r", x)[0]
    q_np, r_np = np.linalg.qr(x)
    np.testing.assert_array_equal(q, q_np)
    np.testing.assert_array_equal(r, r_np)
    np.testing.assert_allclose(q @ r, x, atol=1e-12)
    np.testing.assert_array_equal(r, np.triu(r))


def test_qr_of_a_wide_matrix_passes_its_last_columns_gradient_through_r_only():
    """x = [x1 | x2]: q depends on x1 alone, r's last columns are q^T x2."""
    _, (g,) = run("qr_q", WIDE, weights=RNG.normal(size=(2, 2)))
    np.testing.assert_array_equal(g[:, 2:], 0.0)
    weights = np.zeros((2, 4))
    weights[:, 2:] = RNG.normal(size=(2, 2))
    q, (g,) = run("qr_r", WIDE, weights=weights)
    np.testing.assert_allclose(g[:, 2:], run("qr_q", WIDE)[0] @ weights[:, 2:], atol=1e-12)


def test_matrix_exp_values():
    d = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(run("matrix_exp", np.diag(d))[0], np.diag(np.exp(d)), rtol=1e-14)
    np.testing.assert_array_equal(run("matrix_exp", np.zeros((2, 3, 3)))[0], np.broadcast_to(np.eye(3), (2, 3, 3)))
    rotation = run("matrix_exp", np.array([[0.0, -1.0], [1.0, 0.0]]) * 40)[0]   # 6 squarings
    np.testing.assert_allclose(rotation, [[np.cos(40), -np.sin(40)], [np.sin(40), np.cos(40)]], atol=1e-12)
    nilpotent = np.array([[0.0, 1.0, 2.0], [0.0, 0.0, 3.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(run("matrix_exp", nilpotent)[0], np.eye(3) + nilpotent + nilpotent @ nilpotent / 2)


def test_matrix_exp_of_nan_or_inf_is_nan_throughout_as_torch():
    batch = np.stack([np.array([[1.0, np.nan], [0.0, 1.0]]), np.array([[np.inf, 0.0], [0.0, 1.0]]), np.eye(2)])
    value, (g,) = run("matrix_exp", batch)
    assert np.isnan(value[:2]).all() and np.isnan(g[:2]).all()
    np.testing.assert_allclose(value[2], np.eye(2) * np.e)


# ---------------------------------------------------------------- repeated eigenvalues and singular values
def test_repeated_eigenvalues_give_the_vectors_gradient_inf_or_nan_as_torch_and_the_values_a_finite_one():
    """The eigenvectors of a repeated eigenvalue are not determined: torch's rule divides by the
    0 gap, for a loss that does not depend on the choice too; the eigenvalues' rule does not."""
    for x in (np.eye(3), REPEATED):
        _, (g,) = run("eigvecsh", x, weights=W3, squared=True)
        assert not np.isfinite(g).all()
        _, (g,) = run("eigvalsh", x, weights=np.array([3.0, 1.0, 1.0]))
        assert np.isfinite(g).all()
    # weights alike on the repeated eigenvalue: the same gradient whatever basis LAPACK picks
    np.testing.assert_allclose(run("eigvalsh", REPEATED, weights=np.array([3.0, 1.0, 1.0]))[1][0],
                               np.diag([1.0, 1.0, 3.0]), atol=1e-15)


def test_repeated_or_zero_singular_values_give_the_vectors_gradient_inf_or_nan_and_the_values_a_finite_one():
    for name in ("svd_u", "svd_vh"):
        _, (g,) = run(name, REPEATED, weights=W3, squared=True)
        assert not np.isfinite(g).all()
    # a tall matrix of rank 1: u's columns beyond the square are divided by s = 0
    _, (g,) = run("svd_u", np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]), weights=W3[:, :2], squared=True)
    assert not np.isfinite(g).all()
    _, (g,) = run("svdvals", REPEATED)             # the nuclear norm: u v^T, whatever basis is picked
    np.testing.assert_allclose(g, np.eye(3), atol=1e-15)


DEPENDENT = np.array([[1.0, 2.0], [0.0, 0.0], [0.0, 0.0]])   # r = [[1, 2], [0, 0]]: a 0 on its diagonal


def test_qr_of_dependent_columns_gives_inf_and_nan_as_torch():
    """q's gradient divides by r's diagonal (a triangular solve, as torch's): inf and NaN at its 0."""
    np.testing.assert_array_equal(run("qr_r", DEPENDENT)[0], [[1.0, 2.0], [0.0, 0.0]])
    _, (g,) = run("qr_q", DEPENDENT, weights=W3[:, :2])
    np.testing.assert_array_equal(g, [[np.nan, np.nan], [np.nan, np.nan], [-np.inf, np.inf]])
    assert np.isnan(run("qr_r", DEPENDENT, weights=W3[:2, :2])[1][0]).all()


# ---------------------------------------------------------------- errors
HOLED = np.array([[1.0, 2.0, 0.0], [2.0, np.nan, 0.0], [0.0, 0.0, 3.0]])


@pytest.mark.parametrize("name", ["eigvalsh", "eigvecsh", "svdvals", "svd_u", "svd_vh", "qr_q", "qr_r"])
def test_a_matrix_holding_nan_or_inf_is_an_error_that_says_why(name):
    """torch raises for some (svd of NaN, eigvalsh), gives NaN or LAPACK's other values for the rest."""
    for bad, where in ((HOLED, ""), (np.stack([np.eye(3), np.diag([1.0, np.inf, 1.0])]), " at batch element 1")):
        with pytest.raises(np.linalg.LinAlgError) as caught:
            run(name, bad)
        assert str(caught.value) == (f"{name} of a matrix holding NaN or inf{where} (torch's LAPACK does not converge "
                                     "on it: torch raises LinAlgError, or gives NaN or other values)")


@pytest.mark.parametrize("name, args, message", [
    ("inv_ex", [np.stack([A, np.ones((4, 4))])],
     "inv_ex of a singular matrix at batch element 1 (torch gives info > 0 there, and no inverse, which gradflow "
     "does not compute)"),
    ("inv_ex_info", [np.ones((2, 2))],
     "inv_ex of a singular matrix (torch gives info > 0 there, and no inverse, which gradflow does not compute)"),
    ("cholesky_ex", [np.diag([1.0, -2.0, 1.0])],
     "cholesky_ex of a matrix that is not positive-definite: its leading minor of order 2 is not (torch gives "
     "info = 2 there, and a partial factor, which gradflow does not compute)"),
    ("cholesky_ex_info", [np.stack([np.eye(2), -np.eye(2)])],
     "cholesky_ex of a matrix that is not positive-definite at batch element 1: its leading minor of order 1 is "
     "not (torch gives info = 1 there, and a partial factor, which gradflow does not compute)"),
])
def test_ex_forms_where_torch_s_info_would_not_be_0_are_errors_that_say_so(name, args, message):
    with pytest.raises(np.linalg.LinAlgError) as caught:
        run(name, *args)
    assert str(caught.value) == message


def test_ex_forms_are_inv_and_cholesky_with_an_info_of_zeros():
    spd = SYM @ SYM + np.eye(4)
    batch = np.stack([spd, spd * 2])
    np.testing.assert_array_equal(run("inv_ex", batch)[0], run("inv", batch)[0])
    np.testing.assert_array_equal(run("cholesky_ex", batch, upper=True)[0], run("cholesky", batch, upper=True)[0])
    tape = Tape()
    for name in ("inv_ex_info", "cholesky_ex_info"):
        info = tape.apply(name, tape.param(batch))
        assert info.value.tolist() == [0, 0] and info.dtype == np.int64


@pytest.mark.parametrize("name", ["eigvalsh", "svdvals", "svd_u", "qr_r", "matrix_exp", "inv_ex", "cholesky_ex"])
def test_an_integer_matrix_is_refused_as_torch_refuses_it(name):
    tape = Tape()
    with pytest.raises(TypeError, match=f"^{name} of an integer tensor"):
        tape.apply(name, tape.leaf(np.eye(3, dtype=np.int64)))


@pytest.mark.parametrize("name, shapes, attrs, message", [
    ("eigvalsh", [(3, 4)], {}, "eigvalsh: needs square matrices [..., n, n], got [3, 4]"),
    ("eigvecsh", [(3,)], {}, "eigvecsh: needs square matrices [..., n, n], got [3]"),
    ("svdvals", [(3,)], {}, "svdvals: needs matrices [..., m, n], got [3]"),
    ("svd_u", [(3, 4)], {"full_matrices": 1}, "svd_u: full_matrices must be True or False, not 1"),
    ("qr_q", [()], {}, "qr_q: needs matrices [..., m, n], got []"),
    ("matrix_exp", [(2, 3)], {}, "matrix_exp: needs square matrices [..., n, n], got [2, 3]"),
])
def test_shapes_torch_refuses_are_shape_errors(name, shapes, attrs, message):
    with pytest.raises(ShapeError) as caught:
        lazy_shape(name, *shapes, **attrs)
    assert str(caught.value) == message


def test_shapes_of_each_factor():
    assert lazy_shape("svd_u", (2, 5, 3)) == (2, 5, 3) and lazy_shape("svd_u", (5, 3), full_matrices=True) == (5, 5)
    assert lazy_shape("svd_vh", (2, 5)) == (2, 5) and lazy_shape("svd_vh", (2, 5), full_matrices=True) == (5, 5)
    assert lazy_shape("svdvals", (4, 2, 7)) == (4, 2) and lazy_shape("eigvalsh", (3, 2, 2)) == (3, 2)
    assert lazy_shape("qr_q", (2, 5)) == (2, 2) and lazy_shape("qr_r", (2, 5)) == (2, 5)
    assert lazy_shape("qr_q", (5, 2)) == (5, 2) and lazy_shape("qr_r", (5, 2)) == (2, 2)


def test_empty_matrices_as_torch():
    assert run("svdvals", np.zeros((3, 0)))[0].shape == (0,)
    assert run("svd_u", np.zeros((3, 0)))[0].shape == (3, 0) and run("svd_vh", np.zeros((0, 3)))[0].shape == (0, 3)
    assert run("eigvecsh", np.zeros((2, 0, 0)))[0].shape == (2, 0, 0)
    assert run("qr_r", np.zeros((0, 3)))[0].shape == (0, 3)
    assert run("matrix_exp", np.zeros((0, 0)))[0].shape == (0, 0)


@pytest.mark.parametrize("name, x", [("eigvalsh", SYM), ("eigvecsh", SYM), ("svdvals", TALL), ("svd_u", TALL),
                                     ("svd_vh", WIDE), ("qr_q", TALL), ("qr_r", WIDE), ("matrix_exp", A / 2),
                                     ("inv_ex", A), ("cholesky_ex", SYM @ SYM + np.eye(4))])
def test_float32_stays_float32_close_to_float64(name, x):
    value32, (g32,) = run(name, x, dtype=np.float32, squared=True)
    value64, (g64,) = run(name, x, squared=True)
    assert value32.dtype == np.float32 and g32.dtype == np.float32
    np.testing.assert_allclose(value32, value64, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(g32, g64, rtol=1e-3, atol=1e-4)


# ---------------------------------------------------------------- torch
def torch_grad(fn, x, weights, squared=True):
    torch = pytest.importorskip("torch")
    t = torch.tensor(x, requires_grad=True)
    out = fn(t)
    (((out * out) if squared else out) * torch.tensor(weights)).sum().backward()
    return out.detach().numpy(), t.grad.numpy()


@pytest.mark.torch
@pytest.mark.parametrize("x", [np.stack([SYM, SYM @ SYM]), RNG.normal(size=(3, 2, 5, 5))], ids=["batch", "nested"])
def test_eigh_matches_torch_up_to_the_vectors_sign_and_for_losses_the_sign_does_not_move(x):
    torch = pytest.importorskip("torch")
    x = x + np.swapaxes(x, -1, -2)
    weights = RNG.normal(size=x.shape)
    theirs, their_grad = torch_grad(lambda t: torch.linalg.eigh(t).eigenvectors, x, weights)
    ours, (grad,) = run("eigvecsh", x, weights=weights, squared=True)
    np.testing.assert_allclose(np.abs(ours), np.abs(theirs), atol=1e-12)
    np.testing.assert_allclose(grad, their_grad, rtol=1e-9, atol=1e-12)
    values, values_grad = torch_grad(torch.linalg.eigvalsh, x, weights[..., 0], squared=False)
    np.testing.assert_allclose(run("eigvalsh", x)[0], values, rtol=1e-12, atol=1e-12)   # torch's order: ascending
    np.testing.assert_allclose(run("eigvalsh", x, weights=weights[..., 0])[1][0], values_grad, rtol=1e-9, atol=1e-12)


@pytest.mark.torch
@pytest.mark.parametrize("x", [TALL, WIDE, RNG.normal(size=(2, 3, 4, 6))], ids=["tall", "wide", "nested"])
def test_svd_matches_torch_for_losses_the_sign_does_not_move(x):
    torch = pytest.importorskip("torch")
    for name, k, fn in (("svd_u", 0, lambda t: torch.linalg.svd(t, full_matrices=False).U),
                        ("svd_vh", 2, lambda t: torch.linalg.svd(t, full_matrices=False).Vh),
                        ("svdvals", 1, torch.linalg.svdvals)):
        weights = RNG.normal(size=np.linalg.svd(x, full_matrices=False)[k].shape)
        theirs, their_grad = torch_grad(fn, x, weights)
        ours, (grad,) = run(name, x, weights=weights, squared=True)
        np.testing.assert_allclose(np.abs(ours), np.abs(theirs), atol=1e-12)
        np.testing.assert_allclose(grad, their_grad, rtol=1e-9, atol=1e-12, err_msg=name)
    procrustes = lambda t: torch.linalg.svd(t, full_matrices=False).U @ torch.linalg.svd(t, full_matrices=False).Vh
    theirs = procrustes(torch.tensor(x)).numpy()
    np.testing.assert_allclose(run("svd_u", x)[0] @ run("svd_vh", x)[0], theirs, atol=1e-12)


@pytest.mark.torch
def test_repeated_values_corners_are_torch_s():
    """Where torch's gradient is inf or NaN, gradflow's is not finite either; where torch's is
    finite, they are equal."""
    torch = pytest.importorskip("torch")
    calls = [("eigvecsh", lambda t: torch.linalg.eigh(t).eigenvectors, W3, True),
             ("eigvalsh", torch.linalg.eigvalsh, np.ones(3), False),
             ("svd_u", lambda t: torch.linalg.svd(t).U, W3, True),
             ("svd_vh", lambda t: torch.linalg.svd(t).Vh, W3, True),
             ("svdvals", torch.linalg.svdvals, np.ones(3), False)]
    for x in (np.eye(3), REPEATED, np.diag([1.0, 1.0, 0.0])):
        for name, fn, weights, squared in calls:
            _, their_grad = torch_grad(fn, x, weights, squared)
            _, (grad,) = run(name, x, weights=weights, squared=squared)
            if np.isfinite(their_grad).all():
                np.testing.assert_allclose(grad, their_grad, atol=1e-12, err_msg=name)
            else:
                assert not np.isfinite(grad).all(), name
    for name, fn in (("qr_q", lambda t: torch.linalg.qr(t).Q), ("qr_r", lambda t: torch.linalg.qr(t).R)):
        weights = W3[:, :2] if name == "qr_q" else W3[:2, :2]
        _, their_grad = torch_grad(fn, DEPENDENT, weights, squared=False)
        np.testing.assert_array_equal(run(name, DEPENDENT, weights=weights)[1][0], their_grad)
