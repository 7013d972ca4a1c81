"""torch.linalg's ``_ex`` forms of inv and cholesky, which give (result, info) instead of raising:
info is 0 for a matrix whose inverse (factor) torch computes. Where it would not be, torch gives a
partial result that gradflow does not compute: the forward is an error there, saying so, as it is
where torch raises for inv and cholesky. Their gradients are inv's and cholesky's.
"""

from __future__ import annotations

import numpy as np

from gradflow.engine.kernels_linalg import (
    LinAlgError, batch_element, factor, floats, inv, mT, nan_free, not_positive_definite,
)

EX = "gives info = {order} there, and a partial factor, which gradflow does not compute"


def inv_ex(x):
    """torch.linalg.inv_ex's inverse: inv's. Where torch would set info > 0 (a singular matrix)
    and give no inverse, this is an error, saying so."""
    floats("inv_ex", x)
    try:
        return inv(x)
    except LinAlgError:
        singular = np.linalg.det(nan_free(x)[0]) == 0
        raise LinAlgError(f"inv_ex of a singular matrix{batch_element(singular)} (torch gives info > 0 there, "
                          "and no inverse, which gradflow does not compute)") from None


def cholesky_ex(x, upper=False):
    """torch.linalg.cholesky_ex's factor: cholesky's. Where torch would set info > 0 (a matrix that
    is not positive-definite), this is an error, saying so."""
    floats("cholesky_ex", x)
    sym = (x + mT(x)) / 2
    low = factor(sym)
    if low is None:
        raise not_positive_definite(sym, "cholesky_ex", EX)
    return mT(low) if upper else low


def inv_ex_info(x):
    """torch's info: 0 for each matrix, as inv_ex has made sure."""
    inv_ex(x)
    return np.zeros(x.shape[:-2], np.int64)


def cholesky_ex_info(x):
    cholesky_ex(x)
    return np.zeros(x.shape[:-2], np.int64)
