"""aten's spectral linear algebra -> gradflow's ops: eigh and eigvalsh, svd (torch.linalg's and the
older torch.svd) and svdvals, qr, matrix_exp, one op per output as slogdet's (``Parts``); pinv and
pinverse written with svd (eigh, hermitian=True) as torch computes them, so with torch's gradients;
the nuclear and spectral matrix norms from the singular values; and inv_ex and cholesky_ex, whose
info is 0 where gradflow computes the result (and an error where torch's would not be)."""

from __future__ import annotations

from gradflow.importers.torch.aten_losses import FLOAT32_EPS
from gradflow.importers.torch.aten_linalg import flags, swapped
from gradflow.importers.torch.call import Parts, Unsupported, reduced_over, text


def eigh(c):
    """torch.linalg.eigh(A, UPLO): (eigenvalues, eigenvectors) of the symmetric A, whose triangles
    agree, so UPLO, the one torch reads, changes nothing (gradflow reads (A + A^T) / 2)."""
    return Parts([f"eigvalsh({c.args[0]})", f"eigvecsh({c.args[0]})"])


def full_matrices(c, full) -> str:
    """The full_matrices flag text; a square matrix's full factors are its reduced ones."""
    m, n = c.shapes[0][-2:]
    return flags(full_matrices=(full and m != n, False))


def svd(c):
    """torch.linalg.svd(A, full_matrices=True, driver=): (U, S, Vh); the driver is CUDA's choice."""
    x, full = c.args[0], full_matrices(c, c.arg(1, "full_matrices", True))
    return Parts([f"svd_u({x}{full})", f"svdvals({x})", f"svd_vh({x}{full})"])


def old_svd(c):
    """torch.svd(A, some=True, compute_uv=True): (U, S, V), V = Vh^T."""
    if not c.arg(2, "compute_uv", True):
        raise Unsupported("with compute_uv=False: write torch.linalg.svdvals(A) for the singular values")
    x, full = c.args[0], full_matrices(c, not c.arg(1, "some", True))
    return Parts([f"svd_u({x}{full})", f"svdvals({x})", swapped(f"svd_vh({x}{full})", c.ndim())])


def qr(c):
    """torch.linalg.qr(A, mode='reduced'): (Q, R). mode='complete' is 'reduced' where A has no more
    rows than columns; elsewhere, and for mode='r', torch's backward raises: refused, saying so."""
    mode = c.arg(1, "mode", "reduced")
    m, n = c.shapes[0][-2:]
    if mode == "r":
        raise Unsupported("with mode='r': torch cannot differentiate it (its gradient needs Q); write "
                          "torch.linalg.qr(A) and keep R, the same values")
    if mode == "complete" and m > n:
        raise Unsupported(f"with mode='complete' of a matrix with more rows than columns ({m} x {n}): torch cannot "
                          "differentiate it; mode='reduced' gives the first columns of Q and the rows of R that "
                          "are not 0")
    if mode not in ("reduced", "complete"):
        raise Unsupported(f"with mode={mode!r}")
    return Parts([f"qr_q({c.args[0]})", f"qr_r({c.args[0]})"])


def inv_ex(c):
    """torch.linalg.inv_ex(A, check_errors=False): (inverse, info)."""
    x = c.args[0]
    return Parts([f"inv({x})" if c.kwargs.get("check_errors") else f"inv_ex({x})", f"inv_ex_info({x})"])


def cholesky_ex(c):
    """torch.linalg.cholesky_ex(A, upper=False, check_errors=False): (L, info)."""
    x, upper = c.args[0], flags(upper=(c.arg(1, "upper", False), False))
    op = "cholesky" if c.kwargs.get("check_errors") else "cholesky_ex"
    return Parts([f"{op}({x}{upper})", f"cholesky_ex_info({x})"])


# -- pseudo-inverses ----------------------------------------------------------------------
def tolerances(c, atol, rtol):
    """torch's (atol, rtol) for pinv: atol 0 by default; rtol, when not given, eps * max(m, n) where
    atol is not above 0, else 0. eps is float32's, the type models train in (as rms_norm's eps):
    it only moves the cut between a small singular value and a 0 one."""
    if any(isinstance(t, str) for t in (atol, rtol)):
        raise Unsupported("with a tensor atol or rtol: give each as a number")
    atol = 0.0 if atol is None else float(atol)
    if rtol is None:
        rtol = 0.0 if atol > 0 else FLOAT32_EPS * max(c.shapes[0][-2:])
    return atol, float(rtol)


def pseudo_inverse(c, x: str, atol: float, rtol: float, hermitian: bool) -> str:
    """torch's pinv, as it computes it: V diag(1 / s) U^T over the singular values s above
    max(atol, rtol * the largest), 0 for the rest (with eigh, hermitian: U diag(1 / w) U^T over the
    eigenvalues w of |w| above the cut); the cut passes no gradient, as torch's comparison."""
    nd = c.ndim()
    if hermitian:
        values, size = c.line(f"eigvalsh({x})", "eigenvalues"), "abs({})"
        left = right = c.line(f"eigvecsh({x})", "eigenvectors")
    else:
        values, size = c.line(f"svdvals({x})", "singular_values"), "{}"
        left, right = swapped(f"svd_vh({x})", nd), f"svd_u({x})"
    largest = reduced_over("max", size.format(values), -1, True, "split")
    cut = f"greater({size.format(values)}, maximum({rtol!r} * {largest}, {atol!r}))"
    inverted = f"where({cut}, 1.0 / {values}, 0.0)"
    return f"({left} * expand_dims({inverted}, axis=-2)) @ {swapped(right, nd)}"


def pinv(c):
    """torch.linalg.pinv(A, atol=None, rtol=None, hermitian=False) and its rcond= form."""
    hermitian = bool(c.arg(2, "hermitian", False))
    if c.overload in ("default", "rcond_tensor"):   # (A, rcond, hermitian): rcond is rtol
        atol, rtol = tolerances(c, 0.0, c.arg(1, "rcond"))
    else:
        atol, rtol = tolerances(c, c.kwargs.get("atol"), c.kwargs.get("rtol"))
    return pseudo_inverse(c, c.args[0], atol, rtol, hermitian)


def pinverse(c):
    """torch.pinverse(A, rcond=1e-15): pinv with rtol=rcond."""
    return pseudo_inverse(c, c.args[0], 0.0, float(c.arg(1, "rcond", 1e-15)), False)


# -- matrix norms of the singular values ---------------------------------------------------
def spectral_norm(c, order, dims, keep) -> str:
    """torch's nuclear norm (ord='nuc': the sum of the singular values) and spectral ones (ord=2:
    the largest, -2: the smallest, a tie's gradient shared as torch's amax and amin share it) of the
    matrices over dims, which torch moves to the end first."""
    nd = c.ndim()
    dims = [d % nd for d in dims]
    order_ = [d for d in range(nd) if d not in dims] + dims
    x = c.args[0] if order_ == list(range(nd)) else f"transpose({c.args[0]}, axes={text(tuple(order_))})"
    values = f"svdvals({x})"
    if order == "nuc":
        out = reduced_over("sum", values, -1, False)
    else:
        out = reduced_over("max" if order == 2 else "min", values, -1, False, "split")
    return f"expand_dims({out}, axis={text(tuple(sorted(dims)))})" if keep else out


SPECTRAL_OPS = {
    "linalg_eigh": eigh, "linalg_eigvalsh": lambda c: f"eigvalsh({c.args[0]})",
    "linalg_svd": svd, "svd": old_svd, "linalg_svdvals": lambda c: f"svdvals({c.args[0]})",
    "linalg_qr": qr,
    "linalg_pinv": pinv, "pinverse": pinverse,
    "linalg_matrix_exp": lambda c: f"matrix_exp({c.args[0]})", "matrix_exp": lambda c: f"matrix_exp({c.args[0]})",
    "linalg_inv_ex": inv_ex, "linalg_cholesky_ex": cholesky_ex,
}
