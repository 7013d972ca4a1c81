"""Array code of the elementwise mathematics PyTorch models use beyond the basics: atan2's
gradient, remainder and fmod, the rounding divisions; and the special functions lgamma, digamma
and its derivative trigamma, erfinv and xlogy.

Each follows PyTorch's CPU kernel or its derivatives.yaml formula, in the dtype of its
inputs, so values and gradients are torch's at zeros, signs and infinities too.
"""

from __future__ import annotations

import math

import numpy as np

from gradflow.engine.kernels_nn import erf, erfc, libm


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


# ================================================================ special functions
# Each is worked out in float64 and returned in its input's float dtype, as libm's erf is: so a
# float32 run gets float64's answer rounded once, within float32's rounding of torch's.
HALF_SQRT_PI = math.sqrt(math.pi) / 2
SHIFT = 10.0   # the series below are summed at z >= SHIFT, where their next terms are below 1e-16


def lgamma_of(x: float) -> float:
    """log |gamma(x)| by libm: inf at the poles (0 and the negative integers), as torch's, where
    math.lgamma raises, and past the largest float."""
    try:
        return math.lgamma(x)
    except (ValueError, OverflowError):
        return math.inf


lgamma = libm(lgamma_of)


def float_dtype(x):
    return np.result_type(x, np.float32)


def shifted_up(z, term):
    """(z moved up by whole steps to SHIFT or beyond, the sum of term(z) over the steps taken)."""
    total = np.zeros_like(z)
    for _ in range(int(SHIFT)):
        low = z < SHIFT
        total += np.where(low, term(np.where(low, z, 1.0)), 0.0)
        z = np.where(low, z + 1, z)
    return z, total


def digamma_positive(z):
    """psi at z >= 0: psi(z) = psi(z + n) - sum 1 / (z + k), then the asymptotic series
    log z - 1 / (2 z) - sum B_2k / (2k z ** 2k) (Bernoulli numbers B_2 = 1/6, B_4 = -1/30, ...)."""
    z, steps = shifted_up(z, lambda z: 1 / z)
    w = np.square(1 / z)   # not 1 / z ** 2: that overflows first for a large z
    tail = w * (1 / 12 - w * (1 / 120 - w * (1 / 252 - w * (1 / 240 - w * (1 / 132 - w * (691 / 32760 - w / 12))))))
    return np.log(z) - 0.5 / z - tail - steps


def digamma(x):
    """psi(x), the derivative of lgamma: reflected below 0 as psi(x) = psi(1 - x) - pi / tan(pi x),
    the tangent taken of x's fraction (exact), so a large negative x keeps its digits. As torch's:
    -inf at 0 and inf at -0, NaN at the negative integers and -inf."""
    x64 = np.asarray(x, dtype=np.float64)
    negative = x64 < 0
    whole = np.trunc(x64)
    out = digamma_positive(np.where(negative, 1 - x64, x64))
    out = np.where(negative, out - np.pi / np.tan(np.pi * np.where(negative, x64 - whole, 0.5)), out)
    out = np.where(x64 == 0, np.copysign(np.inf, -x64), out)
    return np.where(negative & (x64 == whole), np.nan, out).astype(float_dtype(x), copy=False)


def trigamma_positive(z):
    """psi'(z) at z >= 0: psi'(z) = psi'(z + n) + sum 1 / (z + k) ** 2, then the asymptotic series
    1 / z + 1 / (2 z ** 2) + sum B_2k / z ** (2k + 1)."""
    z, steps = shifted_up(z, lambda z: 1 / (z * z))
    w = np.square(1 / z)   # not 1 / z ** 2: that overflows first for a large z
    tail = w * (1 / 6 - w * (1 / 30 - w * (1 / 42 - w * (1 / 30 - w * (5 / 66 - w * (691 / 2730 - w * 7 / 6))))))
    return (1 + 0.5 / z + tail) / z + steps


def trigamma(x):
    """psi'(x), digamma's derivative: reflected below 0 as psi'(x) = pi ** 2 / sin(pi x) ** 2 -
    psi'(1 - x), sin(pi x) taken in x's own dtype, as torch's: so at a negative integer it is not
    0 but pi times the rounding of pi x, and the result is huge but finite (6.6e32 at -1 in float64,
    1.3e15 in float32), as torch's; inf at +-0, 0 at inf, NaN at -inf."""
    x64 = np.asarray(x, dtype=np.float64)
    negative = x64 < 0
    out = trigamma_positive(np.where(negative, 1 - x64, x64))
    sine = np.sin(np.pi * np.where(negative, x, 0.5))
    reflected = np.asarray((np.pi * np.pi) / (sine * sine), dtype=np.float64)
    return np.where(negative, reflected - out, out).astype(float_dtype(x), copy=False)


def erfinv_guess(a):
    """erf's inverse at 0 <= a < 1 to about 0.2%: the exact inverse of erf(x) ~ sqrt(1 - e ** -L),
    L = x ** 2 (4 / pi + c x ** 2) / (1 + c x ** 2), c = 0.147: the root x ** 2 of
    c x ** 4 + (4 / pi - c L) x ** 2 - L = 0, written where b > 0 so that it does not cancel."""
    c = 0.147
    big_l = -np.log1p(-a * a)
    b = 2 / (math.pi * c) - big_l / 2
    root = np.sqrt(b * b + big_l / c)
    return np.sqrt(np.where(b > 0, (big_l / c) / (root + np.maximum(b, 0)), root - b))


def erfinv_inside(a):
    """erf's inverse at 0 <= a < 1: the guess, then Newton's steps x -= (erf(x) - a) / erf'(x),
    each squaring the error; beyond a = 0.5 on erfc(x) = 1 - a (exact there), which keeps the
    tail's digits where erf(x) is 1 to the last few."""
    x, tail = erfinv_guess(a), a > 0.5
    for _ in range(4):
        miss = np.empty_like(x)
        miss[tail] = (1 - a[tail]) - erfc(x[tail])
        miss[~tail] = erf(x[~tail]) - a[~tail]
        x = x - miss * HALF_SQRT_PI * np.exp(x * x)
    return x


def erfinv(y):
    """The inverse of erf: +-inf at +-1, NaN beyond, as torch's."""
    y64 = np.asarray(y, dtype=np.float64)
    a = np.abs(y64).reshape(-1)
    x = np.where(a == 1, np.inf, np.nan)
    inside = a < 1
    x[inside] = erfinv_inside(a[inside])
    return np.copysign(x.reshape(y64.shape), y64).astype(float_dtype(y), copy=False)


def xlogy(x, y):
    """x log(y), 0 where x == 0 (y 0 or inf too) and NaN where y is NaN, as torch.xlogy."""
    out = np.where(x == 0, 0, x * np.log(y))
    return np.where(np.isnan(y), y, out)


def xlogy_vjp_x(g, ans, x, y):
    """torch's xlogy(g, y): log(y) times g, 0 where g is (y not NaN); then 0 where x == 0 and
    y <= 0, as torch's."""
    return np.where((x == 0) & (y <= 0), 0, xlogy(g, y))


def xlogy_vjp_y(g, ans, x, y):
    """torch's g * x / y, in that order: NaN at x == y == 0."""
    return g * x / y
