"""aten's linear algebra -> gradflow's ops of that name: inverses, determinants (slogdet's sign and
log |det| as two ops, the sign a cut), solves, triangular solves and the Cholesky factor; and
cholesky_solve and cholesky_inverse written with them, with torch's gradients."""

from __future__ import annotations

from gradflow.importers.torch.call import Alias, Parts, Unsupported


def swapped(x: str, ndim: int) -> str:
    """x with its last two axes swapped (x.mT)."""
    order = list(range(ndim))
    order[-2:] = order[-1], order[-2]
    return f"transpose({x}, axes=({', '.join(map(str, order))}))"


def flags(**given) -> str:
    """', name=value' for each flag that is not at gradflow's default (given as (value, default))."""
    return "".join(f", {name}={bool(value)}" for name, (value, default) in given.items() if bool(value) != default)


def slogdet(c):
    """torch.linalg.slogdet and torch.slogdet: (sign, log |det|); only log |det| passes gradient."""
    return Parts([f"det_sign({c.args[0]})", f"logabsdet({c.args[0]})"])


def solve(c):
    """torch.linalg.solve(A, B): left=False is refused, as writing it out is one line."""
    if not c.arg(2, "left", True):
        raise Unsupported("with left=False: write torch.linalg.solve(A.mT, B.mT).mT instead")
    return f"solve({c.args[0]}, {c.args[1]})"


def cholesky(c):
    """torch.linalg.cholesky(A, upper=) and the older torch.cholesky(A, upper)."""
    return f"cholesky({c.args[0]}{flags(upper=(c.arg(1, 'upper', False), False))})"


def solve_triangular(c):
    upper, left, unit = c.arg(2, "upper"), c.arg(3, "left", True), c.arg(4, "unitriangular", False)
    return (f"solve_triangular({c.args[0]}, {c.args[1]}, upper={bool(upper)}"
            f"{flags(left=(left, True), unitriangular=(unit, False))})")


def triangular_solve(c):
    """The older torch.triangular_solve(b, A, upper=True, transpose=False, unitriangular=False):
    (the solution, A itself); transpose solves with A^T, whose other triangle is A's."""
    b, a = c.args[0], c.args[1]
    upper, transpose, unit = c.arg(2, "upper", True), c.arg(3, "transpose", False), c.arg(4, "unitriangular", False)
    if transpose:
        a, upper = swapped(a, c.ndim(1)), not upper
    return Parts([f"solve_triangular({a}, {b}, upper={bool(upper)}{flags(unitriangular=(unit, False))})",
                  Alias(c.args[1])])


def product(factor: str, ndim: int, upper) -> str:
    """A = L L^T (U^T U for an upper factor), read whole: torch's gradients of cholesky_solve and
    cholesky_inverse are those of this product, the factor's other triangle included (a factor from
    cholesky holds zeros there, so the values are torch's too)."""
    other = swapped(factor, ndim)
    return f"{other} @ {factor}" if upper else f"{factor} @ {other}"


def cholesky_solve(c):
    """torch.cholesky_solve(B, L, upper=False): A^-1 B for A = L L^T. B [..., n, k] is a matrix even
    where solve would take it for a batch of vectors (a's sizes but the last): it is given an axis."""
    b, factor = c.args[0], c.args[1]
    a = product(factor, c.ndim(1), c.arg(2, "upper", False))
    if len(c.shapes[0]) == c.ndim(1) - 1 and tuple(c.shapes[0]) == tuple(c.shapes[1][:-1]):
        b = f"expand_dims({b}, axis=0)"
    return f"solve({a}, {b})"


def cholesky_inverse(c):
    """torch.cholesky_inverse(L, upper=False): (L L^T)^-1."""
    return f"inv({product(c.args[0], c.ndim(), c.arg(1, 'upper', False))})"


LINALG_OPS = {
    "linalg_inv": lambda c: f"inv({c.args[0]})", "inverse": lambda c: f"inv({c.args[0]})",
    "linalg_det": lambda c: f"det({c.args[0]})", "det": lambda c: f"det({c.args[0]})",
    "linalg_slogdet": slogdet, "slogdet": slogdet,
    "logdet": lambda c: f"logdet({c.args[0]})",
    "linalg_solve": solve,
    "linalg_cholesky": cholesky, "cholesky": cholesky,
    "linalg_solve_triangular": solve_triangular, "triangular_solve": triangular_solve,
    "cholesky_solve": cholesky_solve, "cholesky_inverse": cholesky_inverse,
}
