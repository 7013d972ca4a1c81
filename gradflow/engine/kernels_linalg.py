"""Array code of the linear algebra: the inverse, the determinant (its sign and its logarithm too),
a general solve, a triangular solve and the Cholesky factor, with their gradients and shape rules.

Each works on the last two axes, batched over the leading ones as torch.linalg is, in the dtype of
its inputs (an integer tensor is refused, as torch refuses it). Values are LAPACK's, through numpy
(the triangular solves', row by row here), and gradients are torch's formulas, at singular matrices
too; a gradient rule never raises. Where torch raises (a singular
matrix inverted or solved with, a Cholesky factor of a matrix that is not positive-definite), so
does the forward here, saying why; the model turns that into an error at the op's line.
"""

from __future__ import annotations

import numpy as np

from gradflow.engine.shapes import broadcast_shape, fmt
from gradflow.errors import ShapeError, static_text

LinAlgError = np.linalg.LinAlgError   # a ValueError: a failed forward, located like any other


def mT(x):
    """Each matrix of x transposed."""
    return np.swapaxes(x, -1, -2)


def floats(what: str, *xs) -> None:
    """Refuse an integer tensor, as torch.linalg does (it takes floating-point tensors only)."""
    if any(x.dtype.kind != "f" for x in xs):
        raise TypeError(f"{what} of an integer tensor (torch.linalg takes floating-point tensors only)")


def batch_element(bad) -> str:
    """' at batch element k', the first k where bad holds (torch's count); '' for one matrix."""
    hits = np.flatnonzero(bad)
    return f" at batch element {hits[0]}" if np.ndim(bad) and hits.size else ""


def nan_free(x):
    """(x with each matrix that holds a NaN swapped for the identity, which of them held one). torch
    gives NaN for the whole of such a matrix's inverse, determinant or solve (and sign 0), where
    numpy's OpenBLAS may keep some entries, or take the NaN for a zero pivot and raise."""
    bad = np.isnan(x).any(axis=(-1, -2))
    return np.where(np.expand_dims(bad, (-1, -2)), np.eye(x.shape[-1], dtype=x.dtype), x), bad


def with_nan(bad, out, axes: int):
    """out, NaN wherever its matrix (its last ``axes`` axes away) held a NaN."""
    return np.where(np.expand_dims(bad, tuple(range(-axes, 0))) if axes else bad, np.nan, out)


def singular(what: str, x) -> LinAlgError:
    return LinAlgError(f"{what}{batch_element(np.linalg.det(x) == 0)} (torch raises LinAlgError)")


def solved(a, b):
    """a^-1 b for a gradient rule, which must not raise: NaN if an a has no inverse after all (a NaN
    beside a zero pivot; or a^T, whose pivots are not a's, singular where a was not by a rounding)."""
    try:
        return np.linalg.solve(a, b)
    except LinAlgError:
        return np.full(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + b.shape[-2:], np.nan, np.result_type(a, b))


def inverses(x, ok):
    """The inverse of each matrix of x where ok holds, of the identity elsewhere (no singular matrix
    is inverted: numpy would raise for the whole batch), NaN where x holds a NaN."""
    safe, bad = nan_free(x)
    eye = np.eye(x.shape[-1], dtype=x.dtype)
    return with_nan(bad, solved(np.where(np.expand_dims(ok, (-1, -2)), safe, eye), eye), 2)


# ================================================================ inverse and determinants
def inv(x):
    floats("inv", x)
    safe, bad = nan_free(x)
    try:
        return with_nan(bad, np.linalg.inv(safe), 2)
    except LinAlgError:
        raise singular("inv of a singular matrix", safe) from None


def inv_vjp(g, ans, x):
    """-x^-T g x^-T, from the inverse itself, as torch's."""
    return -mT(ans) @ g @ mT(ans)


def det(x):
    floats("det", x)
    safe, bad = nan_free(x)
    return with_nan(bad, np.linalg.det(safe), 0)


def det_vjp(g, ans, x):
    """torch's g det(x) x^-T. Where det(x) is 0 (a singular x, or one whose determinant underflows)
    it is 0, as torch's: torch solves for it with g det(x) = 0 on the right, so a singular x gets
    0, not its adjugate (which is not 0 where x's rank is n - 1)."""
    ok = ans != 0
    return mT(inverses(x, ok)) * np.expand_dims(np.where(ok, g * ans, 0), (-1, -2))


def slogdet(x):
    """(sign, log |det x|), torch's (0, NaN) for a matrix holding a NaN."""
    safe, bad = nan_free(x)
    sign, value = np.linalg.slogdet(safe)
    return np.where(bad, 0, sign), with_nan(bad, value, 0)


def det_sign(x):
    floats("det_sign", x)
    return slogdet(x)[0]


def logabsdet(x):
    floats("logabsdet", x)
    return slogdet(x)[1]


def logabsdet_vjp(g, ans, x):
    """g x^-T, as torch's; NaN at a singular x (log |det| is -inf there; torch's gradient is inf or
    NaN, as its solve with a zero pivot leaves them)."""
    ok = ans != -np.inf
    grad = mT(inverses(x, ok)) * np.expand_dims(g, (-1, -2))
    return np.where(np.expand_dims(ok, (-1, -2)), grad, np.nan)


def logdet(x):
    """log det x, as torch.logdet: NaN where det x < 0, -inf where it is 0."""
    floats("logdet", x)
    sign, value = slogdet(x)
    return np.where(sign < 0, np.nan, value)


def logdet_vjp(g, ans, x):
    """logabsdet's where det x >= 0; 0 where it is negative: torch's logdet picks NaN there with
    a where, which passes no gradient to log |det x|."""
    sign, value = slogdet(x)
    return logabsdet_vjp(np.where(sign < 0, 0, g), value, x)


# ================================================================ solves
def vector_rhs(a, b) -> bool:
    """torch.linalg.solve's rule, on shapes: b is a vector (a batch of them) if it has one axis, or
    one fewer than a and a's sizes but the last; otherwise b is [..., n, k]."""
    return len(b) == 1 or (len(b) == len(a) - 1 and tuple(b) == tuple(a[:-1]))


def solve(a, b):
    floats("solve", a, b)
    safe, bad = nan_free(a)
    vector = vector_rhs(a.shape, b.shape)
    try:
        x = np.linalg.solve(safe, b[..., None] if vector else b)
    except LinAlgError:
        raise singular("solve with a singular matrix a", safe) from None
    return with_nan(bad, x[..., 0] if vector else x, 1 if vector else 2)


def solve_vjp_b(g, ans, a, b):
    """a^-T g, as torch's."""
    safe, bad = nan_free(a)
    vector = vector_rhs(a.shape, b.shape)
    grad = solved(mT(safe), g[..., None] if vector else g)
    return with_nan(bad, grad[..., 0] if vector else grad, 1 if vector else 2)


def solve_vjp_a(g, ans, a, b):
    """-(a^-T g) x^T, as torch's."""
    grad = solve_vjp_b(g, ans, a, b)
    if vector_rhs(a.shape, b.shape):
        return -grad[..., :, None] * ans[..., None, :]
    return -grad @ mT(ans)


def substitute(t, b, upper: bool, unit: bool = False):
    """t^-1 b for a triangular t (lower, or upper), row by row, batched. Only t's triangle is read
    (and not its diagonal when unit: ones there). A 0 on the diagonal gives inf and NaN, as
    torch's triangular solve does (it does not raise)."""
    n = t.shape[-1]
    x = np.zeros(np.broadcast_shapes(t.shape[:-2], b.shape[:-2]) + b.shape[-2:], np.result_type(t, b))
    for i in range(n - 1, -1, -1) if upper else range(n):
        done = slice(i + 1, n) if upper else slice(0, i)
        row = b[..., i, :] - (t[..., i:i + 1, done] @ x[..., done, :])[..., 0, :]
        x[..., i, :] = row if unit else row / t[..., i, i, None]
    return x


def solve_triangular(a, b, upper, left=True, unitriangular=False):
    floats("solve_triangular", a, b)
    if left:
        return substitute(a, b, upper, unitriangular)
    return mT(substitute(mT(a), mT(b), not upper, unitriangular))   # x a = b: a^T x^T = b^T


def solve_triangular_vjp_b(g, ans, a, b, upper, left=True, unitriangular=False):
    """a^-T g (left), g a^-T (right), as torch's."""
    if left:
        return substitute(mT(a), g, not upper, unitriangular)
    return mT(substitute(a, mT(g), upper, unitriangular))


def solve_triangular_vjp_a(g, ans, a, b, upper, left=True, unitriangular=False):
    """-(a^-T g) x^T (left), -x^T (g a^-T) (right), kept to the triangle the forward reads (its
    diagonal left out when unitriangular), as torch's: the other triangle gets 0."""
    grad = solve_triangular_vjp_b(g, ans, a, b, upper, left, unitriangular)
    grad = -(grad @ mT(ans)) if left else -(mT(ans) @ grad)
    return np.triu(grad, int(unitriangular)) if upper else np.tril(grad, -int(unitriangular))


# ================================================================ Cholesky
def factor(x):
    """x's lower Cholesky factor, or None where it has none. (A NaN stops torch's LAPACK as a
    minor that is not positive-definite, where numpy's OpenBLAS passes it through.)"""
    try:
        low = np.linalg.cholesky(x)
    except LinAlgError:
        return None
    return None if np.isnan(np.diagonal(low, axis1=-2, axis2=-1)).any() else low


def not_positive_definite(x, what: str = "cholesky", torch_does: str = "raises LinAlgError") -> LinAlgError:
    """torch's reason: the first matrix of the batch with no factor, the order of its first leading minor that is
    not positive-definite (each larger one is not either: halve the range), and what torch does (given ``order``)."""
    bad = np.array([factor(m) is None for m in x.reshape((-1,) + x.shape[-2:])]).reshape(x.shape[:-2])
    first = x[np.unravel_index(np.flatnonzero(bad)[0], bad.shape)] if bad.ndim else x
    low, high = 1, x.shape[-1]
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if factor(first[:mid, :mid]) is None else (mid + 1, high)
    return LinAlgError(f"{what} of a matrix that is not positive-definite{batch_element(bad)}: its leading minor "
                       f"of order {low} is not (torch {torch_does.format(order=low)})")


def cholesky(x, upper=False):
    """L with L L^T = (x + x^T) / 2 (x itself, for a symmetric x); upper: L^T. The symmetric part
    makes torch's gradient, symmetric, the derivative of the value (torch reads one triangle)."""
    floats("cholesky", x)
    sym = (x + mT(x)) / 2
    low = factor(sym)
    if low is None:
        raise not_positive_definite(sym)
    return mT(low) if upper else low


def cholesky_vjp(g, ans, x, upper=False):
    """torch's L^-T Phi(L^T g) L^-1, where Phi keeps the lower triangle of L^T g and halves it,
    mirrored onto the upper one (so the gradient is symmetric)."""
    low, g = (mT(ans), mT(g)) if upper else (ans, g)
    phi = np.tril(mT(low) @ g)
    phi = (phi + mT(np.tril(phi, -1))) / 2
    half = substitute(mT(low), phi, upper=True)          # L^-T Phi
    return substitute(mT(low), mT(half), upper=True)     # L^-T (Phi L^-1), Phi symmetric


# ================================================================ shape rules
def square(x) -> None:
    if len(x) < 2 or x[-1] != x[-2]:
        raise ShapeError(f"needs square matrices [..., n, n], got {fmt(x)}")


def flag(name: str, value) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise ShapeError(f"{name} must be True or False, not {static_text(value)}")


def matrix_shape(x, upper=False):
    """inv, cholesky: x's shape, of square matrices."""
    square(x)
    flag("upper", upper)
    return x


def det_shape(x):
    """det and its kin: one number per matrix."""
    square(x)
    return x[:-2]


def solve_shape(a, b):
    """a [..., n, n]; b [..., n] (a vector, as vector_rhs decides) or [..., n, k]; batches broadcast."""
    square(a)
    if vector_rhs(a, b):
        if b[-1] != a[-1]:
            raise ShapeError(f"a {fmt(a)} and the vector b {fmt(b)}: b needs {a[-1]} entries")
        return broadcast_shape(a[:-2], b[:-1]) + (a[-1],)
    if len(b) < 2 or b[-2] != a[-1]:
        raise ShapeError(f"a {fmt(a)} and b {fmt(b)}: b needs {a[-1]} rows ([..., {a[-1]}, k]), or to be a vector "
                         f"of {a[-1]} entries")
    return broadcast_shape(a[:-2], b[:-2]) + b[-2:]


def solve_triangular_shape(a, b, upper, left=True, unitriangular=False):
    """a [..., n, n]; b [..., n, k] (left) or [..., k, n] (right); batches broadcast."""
    square(a)
    for name, value in (("upper", upper), ("left", left), ("unitriangular", unitriangular)):
        flag(name, value)
    if len(b) < 2 or (b[-2] if left else b[-1]) != a[-1]:
        need = f"[..., {a[-1]}, k]" if left else f"[..., k, {a[-1]}] (left=False)"
        raise ShapeError(f"a {fmt(a)} and b {fmt(b)}: b needs to be {need}")
    return broadcast_shape(a[:-2], b[:-2]) + b[-2:]
