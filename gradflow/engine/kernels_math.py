"""Array code of the elementwise mathematics PyTorch models use beyond the basics: atan2's
gradient, remainder and fmod, and the rounding divisions.

Each follows PyTorch's CPU kernel or its derivatives.yaml formula, in the dtype of its
inputs, so values and gradients are torch's at zeros, signs and infinities too.
"""

from __future__ import annotations

import numpy as np


def atan2_scale(y, x):
    """1 / (y ** 2 + x ** 2), and 0 where that is infinite (at y = x = 0, or where both squares
    underflow), as torch's atan2_backward: so both gradients are 0 at the origin."""
    scale = 1 / (y * y + x * x)
    return np.where(np.isinf(scale), 0, scale)


def atan2_vjp_y(g, ans, y, x):
    return g * x * atan2_scale(y, x)


def atan2_vjp_x(g, ans, y, x):
    return g * -y * atan2_scale(y, x)


def divided(a, b, what: str):
    """a and b, after refusing an integer division by 0, as torch does (a float's is NaN)."""
    if np.result_type(a, b).kind != "f" and not np.all(b):
        raise ZeroDivisionError(f"{what} of an integer tensor by 0 (torch raises ZeroDivisionError)")
    return a, b


def fmod(a, b):
    """a - trunc(a / b) * b: the sign of a, as C's fmod and torch's."""
    return np.fmod(*divided(a, b, "fmod"))


def remainder(a, b):
    """a - floor(a / b) * b: the sign of b, as Python's % and torch's remainder: fmod, plus b
    where that is not 0 and its sign is not b's."""
    mod = np.fmod(*divided(a, b, "remainder"))
    return np.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod)


def remainder_vjp_b(g, ans, a, b):
    """torch's -g * a.div(b, rounding_mode="floor"): numpy's floor_divide takes the same steps
    (fmod first, so that a whole quotient is not rounded away), +-inf or NaN where b is 0."""
    return -g * np.floor_divide(a, b)


def fmod_vjp_b(g, ans, a, b):
    """torch's -g * a.div(b, rounding_mode="trunc")."""
    return -g * np.trunc(a / b)


def floor_divide(a, b):
    """a / b rounded down as torch's kernel and Python's // compute it, and numpy's floor_divide
    step for step: fmod(a, b) first, then (a - fmod(a, b)) / b, less 1 where fmod's sign is not
    b's, snapped to the nearest whole number. So the quotient of a and b as they are is floored,
    not a quotient already rounded: 1.0 // 0.1 is 9.0 (0.1 is a little above a tenth), where
    floor(1.0 / 0.1) is 10.0. A float b of 0 gives a / b (+-inf, NaN for 0 / 0)."""
    return np.floor_divide(*divided(a, b, "floor division"))


def trunc_divide(a, b):
    """a / b rounded toward zero, as torch's kernel: trunc(a / b) for floats; for integers C's
    division, exact (a - fmod(a, b) is a multiple of b), where a / b in float64 would round
    beyond 2 ** 53."""
    a, b = divided(a, b, "trunc division")
    if np.result_type(a, b).kind == "f":
        return np.trunc(a / b)
    return np.floor_divide(a - np.fmod(a, b), b)
