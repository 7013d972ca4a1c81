"""Array code of the spectral decompositions: the eigenvalues and eigenvectors of a symmetric
matrix, the singular values and vectors, and the QR factors, with their gradients and shape rules.

Each works on the last two axes, batched over the leading ones as torch.linalg is, in the dtype of
its input (an integer tensor is refused, as torch refuses it). A decomposition with several outputs
is one op per output, each computing the whole of it (the forward and each rule alike, so they
agree); their rules add up to torch's, which is linear in the outputs' gradients. Values are
LAPACK's, through numpy, and gradients torch's formulas, with torch's inf and NaN where they divide
by a gap between eigenvalues (singular values) that is 0: a repeated one, where the vectors are
not determined. The sign of each eigenvector, and of each pair of singular vectors, is not
determined either (torch's own differ between its CPU libraries and CUDA): gradflow makes the entry
of largest magnitude of each (of u's, for a pair) positive, the same on every machine. A matrix
holding NaN or inf is an error, as is a decomposition LAPACK cannot converge on: torch raises for
some of them and gives NaN or some other values for the rest.
"""

from __future__ import annotations

import numpy as np

from gradflow.engine.kernels_linalg import LinAlgError, batch_element, flag, floats, mT, square, substitute
from gradflow.engine.shapes import fmt
from gradflow.errors import ShapeError


def finite(what: str, x) -> None:
    bad = ~np.isfinite(x).all(axis=(-1, -2))
    if bad.any():
        raise LinAlgError(f"{what} of a matrix holding NaN or inf{batch_element(bad)} (torch's LAPACK does not "
                          "converge on it: torch raises LinAlgError, or gives NaN or other values)")


def signs(v):
    """+1 or -1 for each column of v [..., m, k], so that the column's entry of largest magnitude
    (the first of them, on a tie) turns positive; shape [..., 1, k]."""
    if v.size == 0:
        return np.ones(v.shape[:-2] + (1, v.shape[-1]), v.dtype)
    big = np.take_along_axis(v, np.argmax(np.abs(v), axis=-2)[..., None, :], axis=-2)
    return np.where(big < 0, v.dtype.type(-1), v.dtype.type(1))


def gaps(values):
    """values[j] - values[i] at [i, j], with 1 on the diagonal (where nothing is divided by it)."""
    gap = values[..., None, :] - values[..., :, None]
    return np.where(np.eye(values.shape[-1], dtype=bool), 1, gap)


# ================================================================ symmetric eigen-decomposition
def eigh(x, what: str = "eigh"):
    """(eigenvalues in ascending order, eigenvectors as columns) of (x + x^T) / 2, which is x for a
    symmetric x (torch reads one triangle: the same there), each eigenvector signed as ``signs``."""
    floats(what, x)
    sym = (x + mT(x)) / 2
    finite(what, sym)
    try:
        values, vectors = np.linalg.eigh(sym)
    except LinAlgError:
        raise LinAlgError(f"{what} did not converge (torch raises LinAlgError)") from None
    return values, vectors * signs(vectors)


def eigvalsh(x):
    return eigh(x, "eigvalsh")[0]


def eigvecsh(x):
    return eigh(x, "eigvecsh")[1]


def eigvalsh_vjp(g, ans, x):
    """V diag(g) V^T, as torch's: finite whatever the eigenvalues."""
    vectors = eigh(x)[1]
    return (vectors * g[..., None, :]) @ mT(vectors)


def eigvecsh_vjp(g, ans, x):
    """torch's V (K / E) V^T, K the skew-symmetric half of V^T g and E[i, j] the gap l[j] - l[i]:
    inf or NaN where two eigenvalues are equal, as torch's (their vectors are not determined)."""
    values, vectors = eigh(x)
    k = mT(vectors) @ g
    return vectors @ (((k - mT(k)) / 2) / gaps(values)) @ mT(vectors)


# ================================================================ singular value decomposition
def svd(x, full_matrices=False, what: str = "svd"):
    """(u, s, vh) with s in descending order; each pair of singular vectors signed as ``signs``
    says of u's column, and the columns of u (rows of vh) beyond min(m, n) that full_matrices adds,
    a basis of what is left, each signed on its own."""
    floats(what, x)
    finite(what, x)
    try:
        u, s, vh = np.linalg.svd(x, full_matrices=full_matrices)
    except LinAlgError:
        raise LinAlgError(f"{what} did not converge (torch raises LinAlgError)") from None
    k = s.shape[-1]
    pair = signs(u[..., :k])
    u = np.concatenate([u[..., :k] * pair, u[..., k:] * signs(u[..., k:])], axis=-1)
    rest = vh[..., k:, :]
    return u, s, np.concatenate([vh[..., :k, :] * mT(pair), rest * mT(signs(mT(rest)))], axis=-2)


def svd_grad(gu, gs, gvh, u, s, vh):
    """torch's gradient of x = u diag(s) vh (u [..., m, k], vh [..., k, n], k = min(m, n)) given
    those of its factors (None: not read). The vectors' part divides by the gaps s[j]^2 - s[i]^2
    (inf or NaN where two singular values are equal) and, beyond the square, by s itself (where 0);
    the values' part, u diag(gs) vh, is finite."""
    m, n, k = u.shape[-2], vh.shape[-1], s.shape[-1]
    if gu is None and gvh is None:
        return (u * gs[..., None, :]) @ vh
    inner = 0
    if gu is not None:
        k_u = mT(u) @ gu
        inner = ((k_u - mT(k_u)) / gaps(s * s)) * s[..., None, :]
    if gvh is not None:
        k_v = vh @ mT(gvh)
        inner = inner + s[..., :, None] * ((k_v - mT(k_v)) / gaps(s * s))
    if gs is not None:
        inner = inner + gs[..., None, :] * np.eye(k, dtype=s.dtype)
    if gu is not None and m > k:       # u's columns beyond the square reach x through (I - u u^T)
        over = gu / s[..., None, :]
        return (u @ inner + over - u @ (mT(u) @ over)) @ vh
    if gvh is not None and n > k:
        over = gvh / s[..., :, None]
        return u @ (inner @ vh + over - (over @ mT(vh)) @ vh)
    return u @ inner @ vh


def svdvals(x):
    return svd(x, what="svdvals")[1]


def svd_u(x, full_matrices=False):
    return svd(x, full_matrices, "svd_u")[0]


def svd_vh(x, full_matrices=False):
    return svd(x, full_matrices, "svd_vh")[2]


def svdvals_vjp(g, ans, x):
    u, s, vh = svd(x)
    return svd_grad(None, g, None, u, s, vh)


def svd_u_vjp(g, ans, x, full_matrices=False):
    """The columns full_matrices adds beyond min(m, n) get no gradient, as torch's (which narrows
    u and its gradient to the first min(m, n) columns: those columns are any basis of the rest)."""
    u, s, vh = svd(x)
    return svd_grad(g[..., :s.shape[-1]], None, None, u, s, vh)


def svd_vh_vjp(g, ans, x, full_matrices=False):
    u, s, vh = svd(x)
    return svd_grad(None, None, g[..., :s.shape[-1], :], u, s, vh)


# ================================================================ QR
def qr(x, what: str = "qr"):
    """(q [..., m, k], r [..., k, n]), k = min(m, n), from LAPACK's Householder reflections (r's
    diagonal may be negative), the same as torch's; NaN or inf is an error, as torch's values
    there depend on how its LAPACK orders the work."""
    floats(what, x)
    finite(what, x)
    return np.linalg.qr(x)


def qr_q(x):
    return qr(x, "qr_q")[0]


def qr_r(x):
    return qr(x, "qr_r")[1]


def qr_grad(gq, gr, x, q, r):
    """The gradient of x = q r given gq and gr (None: 0), torch's: with x = [x1 | x2], x1 the first
    k columns, r = [r1 | r2] and r2 = q^T x2, it is [(gq' + q M) r1^-T | q gr2] where gq' is gq with
    r2's part x2 gr2^T added, and M is gr1 r1^T - q^T gq' with its upper triangle mirrored onto
    the lower. A 0 on r's diagonal (a rank-deficient x1) gives inf and NaN, as in torch."""
    k = r.shape[-2]
    gq = np.zeros_like(q) if gq is None else gq
    gr = np.zeros_like(r) if gr is None else gr
    gq = gq + x[..., k:] @ mT(gr[..., k:])
    m = gr[..., :k] @ mT(r[..., :k]) - mT(q) @ gq
    b = gq + q @ (np.triu(m) + mT(np.triu(m, 1)))
    first = mT(substitute(r[..., :k], mT(b), upper=True))     # b r1^-T: r1 y^T = b^T
    return np.concatenate([first, q @ gr[..., k:]], axis=-1)


def qr_q_vjp(g, ans, x):
    return qr_grad(g, None, x, *qr(x))


def qr_r_vjp(g, ans, x):
    return qr_grad(None, g, x, *qr(x))


# ================================================================ matrix exponential
PADE_ORDER = 8                  # a [8/8] Pade approximant: error below 1e-18 for a 1-norm up to 1


def pade_coefficients(q: int) -> list:
    """c[k] = (2q - k)! q! / ((2q)! k! (q - k)!), as Python floats (a numpy float64 would turn a
    float32 tape's matrices float64)."""
    out = [1.0]
    for k in range(1, q + 1):
        out.append(out[-1] * (q - k + 1) / (k * (2 * q - k + 1)))
    return out


PADE = pade_coefficients(PADE_ORDER)


def matrix_exp(x):
    """e^x of each square matrix: x scaled by 2^-s to a 1-norm of at most 1, the Pade approximant
    of that, squared s times. A matrix holding NaN or inf gives NaN throughout, as torch's."""
    floats("matrix_exp", x)
    bad = ~np.isfinite(x).all(axis=(-1, -2))
    safe = np.where(bad[..., None, None], 0, x)
    norm = np.abs(safe).sum(axis=-2).max(axis=-1, initial=0)
    with np.errstate(divide="ignore"):
        steps = np.maximum(0, np.ceil(np.log2(norm))).astype(int)
    power = np.ldexp(safe, -steps[..., None, None])
    top = bottom = np.eye(x.shape[-1], dtype=x.dtype) * PADE[0]
    term = np.eye(x.shape[-1], dtype=x.dtype)
    for k in range(1, PADE_ORDER + 1):
        term = term @ power
        top, bottom = top + PADE[k] * term, bottom + (-1) ** k * PADE[k] * term
    out = np.linalg.solve(bottom, top)
    for step in range(int(steps.max(initial=0))):
        out = np.where((step < steps)[..., None, None], out @ out, out)
    return np.where(bad[..., None, None], np.nan, out)


def matrix_exp_vjp(g, ans, x):
    """torch's: the top right block of e^[[x^T, g], [0, x^T]], e^x's derivative taken along g
    at x^T (the block-triangular matrix's exponential holds it there)."""
    n, xt = x.shape[-1], mT(x)
    shape = np.broadcast_shapes(x.shape, g.shape)
    block = np.zeros(shape[:-2] + (2 * n, 2 * n), np.result_type(x, g))
    block[..., :n, :n] = block[..., n:, n:] = xt
    block[..., :n, n:] = g
    return matrix_exp(block)[..., :n, n:]


# ================================================================ shape rules
def matrices(x) -> tuple:
    """(m, n) of matrices [..., m, n]."""
    if len(x) < 2:
        raise ShapeError(f"needs matrices [..., m, n], got {fmt(x)}")
    return x[-2], x[-1]


def eigvalsh_shape(x):
    square(x)
    return x[:-1]


def svdvals_shape(x):
    m, n = matrices(x)
    return x[:-2] + (min(m, n),)


def svd_u_shape(x, full_matrices=False):
    m, n = matrices(x)
    flag("full_matrices", full_matrices)
    return x[:-2] + (m, m if full_matrices else min(m, n))


def svd_vh_shape(x, full_matrices=False):
    m, n = matrices(x)
    flag("full_matrices", full_matrices)
    return x[:-2] + (n if full_matrices else min(m, n), n)


def qr_q_shape(x):
    m, n = matrices(x)
    return x[:-2] + (m, min(m, n))


def qr_r_shape(x):
    m, n = matrices(x)
    return x[:-2] + (min(m, n), n)
