"""Every op's gradient against central finite differences, and its shape rule against its forward.

CASES is the test table: one row per op, each a list of ``Case``. A guard test
fails when an op of OPS has no row, so adding an op means adding its row here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

from gradflow.engine import OPS, Tape
from gradflow.engine.ops import REQUIRED
from gradflow.engine.tape import pass_on
from gradflow.engine.tensor import fit
from gradflow.errors import ShapeError

SHAPES = [(), (4,), (3, 4), (1, 4)]


@dataclass
class Case:
    """Inputs for one op call: ``make(rng)`` returns the input arrays; ``attrs`` the static arguments."""
    id: str
    make: Callable
    attrs: dict = field(default_factory=dict)


def normal(*shapes, low=None):
    """Inputs drawn from N(0, 1) (or uniform in [low, low + 1] for ops that need a domain)."""
    def make(rng):
        if low is None:
            return [rng.normal(size=s) for s in shapes]
        return [rng.uniform(low, low + 1, size=s) for s in shapes]
    return make


def args(*makers):
    """Inputs from one maker per argument: ``args(N(3, 4), I(3, high=4))``."""
    return lambda rng: [m(rng) for m in makers]


def N(*shape):
    return lambda rng: rng.normal(size=shape)


def U(*shape, lo=0.1, hi=0.9):
    return lambda rng: rng.uniform(lo, hi, size=shape)


def I(*shape, high):
    return lambda rng: rng.integers(0, high, size=shape)


def B(*shape):
    """A 0.0/1.0 float mask, as a comparison gives."""
    return lambda rng: (rng.random(size=shape) > 0.5).astype(float)


def unary(low=None, shapes=SHAPES, **attrs):
    return [Case(f"{list(s)}", normal(s, low=low), attrs) for s in shapes]


def binary(low=None):
    pairs = [(s, s) for s in SHAPES] + [((3, 4), (1, 4)), ((3, 4), ()), ((4,), (3, 4))]
    return [Case(f"{list(a)}-{list(b)}", normal(a, b, low=low)) for a, b in pairs]


def divisions():
    """remainder / fmod: dividends of either sign, divisors of either sign away from 0, in the
    binary ops' shapes (a central difference would straddle a jump only at a whole a / b)."""
    def make(a, b):
        return lambda rng: [rng.normal(size=a) * 3, rng.choice([-1.0, 1.0], size=b) * rng.uniform(0.5, 2, size=b)]
    pairs = [(s, s) for s in SHAPES] + [((3, 4), (1, 4)), ((3, 4), ()), ((4,), (3, 4))]
    return [Case(f"{list(a)}-{list(b)}", make(a, b)) for a, b in pairs]


def rounding_divisions():
    """floor_divide / trunc_divide: remainder's cases (no gradient, so no difference is taken),
    and an integer tensor by a float one (integers by integers: test_rounding_division.py)."""
    return divisions() + [Case("int-by-float", args(I(3, 4, high=9), U(4, lo=0.5, hi=2.0)))]


def sorted_boundaries(*shape):
    return lambda rng: np.sort(rng.normal(size=shape), axis=-1)


def reduction():
    cases = [Case(f"{list(s)}", normal(s)) for s in SHAPES]
    cases += [Case("axis0", normal((3, 4)), {"axis": 0}),
              Case("axis-1-keep", normal((3, 4)), {"axis": -1, "keepdims": True}),
              Case("axes01", normal((2, 3, 4)), {"axis": (0, 2)}),
              Case("axes-list", normal((2, 3, 4)), {"axis": [1, -1], "keepdims": True}),
              Case("no-axes", normal((3, 4)), {"axis": ()}),
              Case("all-keep", normal((3, 4)), {"keepdims": True}),
              Case("row", normal((1, 4)), {"axis": 1})]
    return cases


def extreme():
    """max/min: the reductions' cases, and ties="split" on random values and on exact two-way ties,
    where a central difference gives each tied entry half, as splitting does."""
    ties = np.array([[1.0, 3.0, 3.0, 0.0], [-2.0, 0.5, -2.0, 0.5]])
    return reduction() + [Case("split-axis", normal((3, 4)), {"axis": 1, "ties": "split"}),
                          Case("split-all-keep", normal((3, 4)), {"keepdims": True, "ties": "split"}),
                          Case("split-two-way-ties", lambda rng: [ties.copy()], {"axis": 1, "ties": "split"})]


def along_axis(shapes=((4,), (3, 4), (1, 4))):
    """Ops over one axis (softmax and friends): no scalar case, an axis is needed."""
    return [Case(f"{list(s)}", normal(s)) for s in shapes] + [
        Case("axis0", normal((3, 4)), {"axis": 0}),
        Case("3d-axis1", normal((2, 3, 4)), {"axis": 1})]


def arg_reduction():
    return unary() + [Case("axis0", normal((3, 4)), {"axis": 0}),
                      Case("axis-1-keep", normal((3, 4)), {"axis": -1, "keepdims": True}),
                      Case("all-keep", normal((3, 4)), {"keepdims": True})]


def scan(**attrs):
    """Ops along one given axis (cumsum and kin): every axis of a few shapes, negative ones too."""
    return [Case("[4]", normal((4,)), {"axis": 0, **attrs}), Case("[3, 4]", normal((3, 4)), {"axis": 1, **attrs}),
            Case("axis0", normal((3, 4)), {"axis": 0, **attrs}), Case("[1, 4]", normal((1, 4)), {"axis": -1, **attrs}),
            Case("3d", normal((2, 3, 4)), {"axis": -2, **attrs})]


def distinct(*shape, high, axis):
    """Integer indices below ``high``, none repeated along axis (scatter's writes then all stand)."""
    def make(rng):
        moved = list(shape)
        moved.append(moved.pop(axis))
        rows = [rng.permutation(high)[:moved[-1]] for _ in range(int(np.prod(moved[:-1])))]
        return np.moveaxis(np.reshape(rows, moved), -1, axis)
    return make


def scatters(repeats: bool):
    """scatter / scatter_add: an index along either axis, shorter than x along the other, values
    broadcast to it; with ``repeats``, indices repeated along the axis."""
    index = (lambda *shape, high, axis: I(*shape, high=high)) if repeats else distinct
    return [Case("axis1", args(N(3, 4), index(3, 2, high=4, axis=1), N(3, 2)), {"axis": 1}),
            Case("axis0-shorter", args(N(3, 4), index(2, 3, high=3, axis=0), N(2, 3)), {"axis": 0}),
            Case("vector", args(N(5), index(3, high=5, axis=0), N(3)), {"axis": -1}),
            Case("broadcast-src", args(N(3, 4), index(3, 2, high=4, axis=1), N(1, 2)), {"axis": 1}),
            Case("scalar-src", args(N(2, 4), index(2, 3, high=4, axis=1), N()), {"axis": 1})]


def pooling():
    return [Case("k2", normal((2, 3, 4, 4)), {"kernel": 2}),
            Case("k3-s1-overlap", normal((1, 2, 5, 5)), {"kernel": 3, "stride": 1}),
            Case("pair", normal((1, 1, 5, 6)), {"kernel": (2, 3), "stride": (1, 2)}),
            Case("2d", normal((4, 4)), {"kernel": 2}),
            Case("row", normal((1, 4)), {"kernel": (1, 2)})]


def pooling3d():
    return [Case("k2", normal((2, 2, 4, 4, 4)), {"kernel": 2}),
            Case("k3-s1-overlap", normal((1, 1, 4, 5, 5)), {"kernel": 3, "stride": 1}),
            Case("triple", normal((1, 2, 3, 5, 6)), {"kernel": (1, 2, 3), "stride": (1, 2, 2)}),
            Case("stride-over-kernel", normal((1, 1, 5, 5, 6)), {"kernel": 2, "stride": 3}),
            Case("3d", normal((3, 4, 4)), {"kernel": 2})]


def grid_samples():
    """Points inside and a little outside the input (-1.3 to 1.3), in every mode, padding and
    alignment; 3-d volumes too. No point lands within the difference's step of a kink."""
    def points(*shape):
        return U(*shape, lo=-1.3, hi=1.3)
    cases = [Case(f"{mode}-{pad}-{'aligned' if align else 'edges'}", args(N(2, 3, 4, 5), points(2, 3, 2, 2)),
                  {"mode": mode, "padding_mode": pad, "align_corners": align})
             for mode in ("bilinear", "nearest") for pad in ("zeros", "border", "reflection")
             for align in (False, True)]
    return cases + [Case("default", args(N(1, 1, 3, 3), points(1, 4, 4, 2))),
                    Case("3d", args(N(1, 2, 3, 4, 5), points(1, 2, 3, 2, 3)), {"align_corners": True}),
                    Case("3d-border", args(N(2, 1, 2, 3, 3), points(2, 1, 2, 2, 3)), {"padding_mode": "border"})]


def scatter_reductions():
    """scatter_reduce: each reduction, x's own entries in and out, indices repeated along either
    axis; an exact two-way tie (a difference gives each half, as the split does); zeros in a product."""
    cases = []
    for reduce in ("amax", "amin", "prod"):
        for own in (True, False):
            attrs = {"reduce": reduce, "include_self": own}
            cases += [Case(f"{reduce}-{own}-axis1", args(N(3, 4), I(3, 5, high=4), N(3, 5)), {"axis": 1, **attrs}),
                      Case(f"{reduce}-{own}-axis0", args(N(3, 4), I(4, 2, high=3), N(4, 2)), {"axis": 0, **attrs}),
                      Case(f"{reduce}-{own}-broadcast", args(N(5), I(4, high=5), N(1)), {"axis": 0, **attrs})]
    tie = lambda rng: [np.array([1.0, 2.0, 0.5]), np.array([0, 0, 1, 2]), np.array([3.0, 3.0, 0.5, -1.0])]
    zeros = lambda rng: [np.array([2.0, 0.0, 3.0]), np.array([0, 0, 1, 2, 2]), np.array([0.0, 4.0, 5.0, 0.0, 0.0])]
    return cases + [Case("amax-tie", tie, {"axis": 0, "reduce": "amax"}),
                    Case("amin-tie-with-self", tie, {"axis": 0, "reduce": "amin"}),
                    Case("prod-zeros", zeros, {"axis": 0, "reduce": "prod"}),
                    Case("prod-zeros-no-self", zeros, {"axis": 0, "reduce": "prod", "include_self": False})]


def matrices(*shape, spd=False, flip=False):
    """Square matrices far from singular: N(0, 1) entries plus n on the diagonal (spd: m m^T + n I,
    symmetric positive-definite); flip: the first row negated, so the determinant is negative."""
    def make(rng):
        m, n = rng.normal(size=shape), shape[-1]
        out = m @ np.swapaxes(m, -1, -2) + n * np.eye(n) if spd else m + n * np.eye(n)
        return out * np.where(np.arange(n) == 0, -1.0, 1.0)[:, None] if flip else out
    return make


def square_matrices(spd=False, flip=True):
    """inv and the determinants: one matrix, a batch, 1x1, two batch axes; a negative determinant."""
    cases = [Case(f"{list(s)}", args(matrices(*s, spd=spd))) for s in ((3, 3), (2, 3, 3), (1, 1), (2, 1, 4, 4))]
    return cases + ([Case("negative-det", args(matrices(3, 3, flip=True)))] if flip else [])


def triangular_solves():
    """Either triangle, from either side, with and without a unit diagonal, batches broadcast."""
    cases = []
    for upper in (False, True):
        for left in (True, False):
            b = N(2, 3, 2) if left else N(2, 2, 3)
            attrs = {"upper": upper, "left": left}
            cases.append(Case(f"{'upper' if upper else 'lower'}-{'left' if left else 'right'}",
                              args(matrices(3, 3), b), attrs))
            cases.append(Case(f"{cases[-1].id}-unit", args(matrices(2, 3, 3), b), {**attrs, "unitriangular": True}))
    return cases


def spread(*shape, symmetric=False):
    """Matrices [..., m, n] whose singular values are 0.35 or more apart and from 0 (symmetric:
    eigenvalues of either sign, 0.35 or more apart): q1 diag(values) q2^T for random orthogonal q1, q2,
    so that each vector, signed by its largest entry, moves smoothly under a finite difference."""
    def make(rng):
        m, n = shape[-2:]
        k = min(m, n)
        q1 = np.linalg.qr(rng.normal(size=shape[:-2] + (m, m)))[0][..., :k]
        q2 = q1 if symmetric else np.linalg.qr(rng.normal(size=shape[:-2] + (n, n)))[0][..., :k]
        values = (np.arange(k) - (k // 2 if symmetric else -1)) * 0.7 + 0.35 * rng.uniform(size=shape[:-2] + (k,))
        return (q1 * values[..., None, :]) @ np.swapaxes(q2, -1, -2)
    return make


def spectral(symmetric=False, full=None):
    """Decompositions: one matrix, a batch, 1x1; tall and wide ones where not symmetric; full: the
    full_matrices flag on a square batch (the same factors)."""
    shapes = [(3, 3), (2, 4, 4), (1, 1)] + ([] if symmetric else [(4, 2), (2, 5), (2, 1, 3, 4)])
    cases = [Case(f"{list(s)}", args(spread(*s, symmetric=symmetric))) for s in shapes]
    return cases + ([Case("full-square", args(spread(2, 3, 3)), {"full_matrices": True})] if full else [])


CASES: dict[str, list[Case]] = {
    # arithmetic
    "add": binary(),
    "sub": binary(),
    "mul": binary(),
    "div": binary(low=0.5),
    "pow": binary(low=0.5),
    "matmul": [Case("2d", normal((3, 4), (4, 2))), Case("vec-mat", normal((4,), (4, 2))),
               Case("mat-vec", normal((3, 4), (4,))), Case("vec-vec", normal((4,), (4,))),
               Case("batched", normal((2, 3, 4), (4, 2))), Case("row", normal((1, 4), (4, 3))),
               Case("batch-broadcast", normal((2, 1, 3, 4), (5, 4, 2)))],
    "neg": unary(),
    "remainder": divisions(),
    "fmod": divisions(),
    # elementwise
    "exp": unary(),
    "log": unary(low=0.5),
    "log1p": unary(low=0.5),
    "sqrt": unary(low=0.5),
    "square": unary(),
    "abs": unary(),
    "sin": unary(),
    "cos": unary(),
    "acos": unary(low=-0.5),
    "asin": unary(low=-0.5),
    "atan": unary(),
    "atan2": binary(),
    "tanh": unary(),
    "sigmoid": unary(),
    "relu": unary(),
    "leaky_relu": unary() + [Case("slope", normal((3, 4)), {"slope": 0.2})],
    "elu": unary() + [Case("alpha", normal((3, 4)), {"alpha": 0.5})],
    "gelu": unary() + [Case(f"exact-{list(sh)}", normal(sh), {"approximate": "none"}) for sh in SHAPES],
    "silu": unary(),
    "softplus": unary(),
    "erf": unary(),
    "erfc": unary(),
    # the special functions away from their poles: near 1, between negative integers, far out
    "lgamma": unary(low=0.5) + [Case("negative", args(U(3, 4, lo=-2.9, hi=-2.1))),
                                Case("large", args(U(3, 4, lo=5.0, hi=40.0)))],
    "digamma": unary(low=0.5) + [Case("negative", args(U(3, 4, lo=-2.9, hi=-2.1))),
                                 Case("large", args(U(3, 4, lo=5.0, hi=40.0)))],
    "erfinv": unary(low=-0.5) + [Case("tails", args(U(3, 4, lo=0.9, hi=0.99))),
                                 Case("lower-tail", args(U(4, lo=-0.99, hi=-0.9)))],
    "xlogy": binary(low=0.5) + [Case("x-zero", lambda rng: [np.array([0.0, 1.5, 0.0, -2.0]), rng.uniform(0.5, 2, 4)]),
                                Case("x-negative", args(N(3, 4), U(1, 4, lo=0.5, hi=2.0)))],
    "clip": unary(lo=-0.5, hi=0.5) + [Case("no-lo", normal((3, 4)), {"lo": None, "hi": 0.3}),
                                      Case("no-hi", normal((3, 4)), {"lo": -0.3, "hi": None})],
    "hardtanh": unary() + [Case("range", normal((3, 4)), {"lo": -0.3, "hi": 0.6})],
    "nan_to_num": unary() + [Case("chosen", normal((3, 4)), {"nan": 0.5, "posinf": 2.0, "neginf": -2.0})],
    "maximum": binary(),
    "minimum": binary(),
    "where": [Case(f"{list(s)}", args(B(*s), N(*s), N(*s))) for s in SHAPES] + [
        Case("int-cond", args(I(3, 4, high=2), N(3, 4), N(3, 4))),
        Case("broadcast-cond", args(B(1, 4), N(3, 4), N(3, 1))),
        Case("broadcast-values", args(B(3, 4), N(4), N())),
        Case("bool-cond", lambda rng: [rng.random((3, 4)) > 0.5, rng.normal(size=(3, 4)),
                                       rng.normal(size=(1, 4))])],
    # reductions
    "sum": reduction(),
    "mean": reduction(),
    "prod": reduction() + [
        Case("one-zero", lambda rng: [np.array([2.0, 0.0, -3.0, 0.5])]),
        Case("two-zeros", lambda rng: [np.array([[2.0, 0.0, -3.0], [0.0, 1.5, 0.0]])]),
        Case("zeros-axis1", lambda rng: [np.array([[2.0, 0.0, -3.0, 0.5], [0.0, 0.0, 1.0, 2.0],
                                                   [1.5, 2.0, -0.5, 4.0]])], {"axis": 1}),
        Case("zeros-axis0-keep", lambda rng: [np.array([[2.0, 0.0, -3.0], [0.0, 0.0, 1.0]])],
             {"axis": 0, "keepdims": True}),
        Case("zeros-axes", lambda rng: [np.array([[[2.0, 0.0], [-3.0, 0.5]], [[1.0, 2.0], [3.0, 0.0]]])],
             {"axis": (0, 2)})],
    "max": extreme(),
    "min": extreme(),
    "logsumexp": reduction(),
    "var": reduction(),
    "norm": reduction(),
    # scans
    "cumsum": scan(),
    "cumprod": scan() + [
        Case("zeros", lambda rng: [np.array([[2.0, 0.0, 3.0, 0.0, 5.0], [0.0, 0.5, -1.0, 2.0, 3.0],
                                             [1.5, 2.0, -0.5, 4.0, 0.0], [0.0, 0.0, 1.0, 2.0, 1.5]])], {"axis": 1})],
    "logcumsumexp": scan(),
    # shape
    "getitem": [Case("int", normal((4,)), {"index": 1}),
                Case("slice", normal((3, 4)), {"index": (slice(None), slice(1, 3))}),
                Case("none-ellipsis", normal((3, 4)), {"index": (Ellipsis, None, 2)}),
                Case("step", normal((1, 4)), {"index": (0, slice(None, None, -2))}),
                Case("scalar", normal(()), {"index": ()})],
    "reshape": [Case("[3, 4]", normal((3, 4)), {"shape": (4, 3)}),
                Case("infer", normal((3, 4)), {"shape": (2, -1, 2)}),
                Case("flatten", normal((3, 4)), {"shape": [-1]}),
                Case("[]", normal(()), {"shape": (1, 1)}),
                Case("[4]", normal((4,)), {"shape": (2, 2)}),
                Case("[1, 4]", normal((1, 4)), {"shape": 4})],
    "transpose": [Case("[]", normal(())), Case("[4]", normal((4,))), Case("[3, 4]", normal((3, 4))),
                  Case("[1, 4]", normal((1, 4)), {"axes": (1, 0)}),
                  Case("perm", normal((2, 3, 4)), {"axes": (1, 0, 2)}),
                  Case("negative", normal((2, 3, 4)), {"axes": [-1, 0, 1]})],
    "expand_dims": [Case("[]", normal(()), {"axis": 0}), Case("[4]", normal((4,)), {"axis": 0}),
                    Case("[3, 4]", normal((3, 4)), {"axis": -1}),
                    Case("[1, 4]", normal((1, 4)), {"axis": 1}),
                    Case("two", normal((3, 4)), {"axis": (0, 3)})],
    "squeeze": [Case("[]", normal(())), Case("[4]", normal((4,))), Case("[1, 4]", normal((1, 4))),
                Case("axis", normal((1, 4)), {"axis": 0}),
                Case("axes", normal((3, 1, 4, 1)), {"axis": (1, -1)})],
    "broadcast_to": [Case("[]", normal(()), {"shape": (3, 4)}),
                     Case("[4]", normal((4,)), {"shape": (3, 4)}),
                     Case("[1, 4]", normal((1, 4)), {"shape": (2, 3, 4)}),
                     Case("[3, 1]", normal((3, 1)), {"shape": [3, 4]}),
                     Case("same", normal((3, 4)), {"shape": (3, 4)})],
    "concat": [Case("axis0", normal((3, 4), (2, 4))),
               Case("axis1", normal((3, 4), (3, 2)), {"axis": 1}),
               Case("axis-1", normal((1, 4), (1, 4)), {"axis": -1}),
               Case("three", normal((4,), (4,), (2,))),
               Case("one", normal((3, 4)))],
    "stack": [Case("scalars", normal((), (), ())),
              Case("[4]", normal((4,), (4,))),
              Case("[3, 4]", normal((3, 4), (3, 4))),
              Case("last", normal((1, 4), (1, 4)), {"axis": -1}),
              Case("middle", normal((3, 4), (3, 4), (3, 4)), {"axis": 1}),
              Case("one", normal((3, 4)))],
    "take": [Case("axis0", args(N(3, 4), I(2, high=3)), {"axis": 0}),
             Case("axis1-repeats", lambda rng: [rng.normal(size=(3, 4)), np.array([[1, 1], [3, 0]])],
                  {"axis": 1}),
             Case("flat", args(N(3, 4), I(5, high=12))),
             Case("negative-axis", args(N(1, 4), I(3, high=4)), {"axis": -1}),
             Case("scalar-index", args(N(4), I(high=4)), {"axis": 0}),
             Case("negative-index", lambda rng: [rng.normal(size=(4,)), np.array([-1, 0, -1])])],
    "take_along_axis": [
        Case("gather", args(N(3, 4), I(3, 1, high=4)), {"axis": 1}),
        Case("axis0", args(N(3, 4), I(2, 4, high=3)), {"axis": 0}),
        Case("repeats", lambda rng: [rng.normal(size=(1, 4)), np.array([[2, 2, 0]])], {"axis": -1}),
        Case("broadcast", args(N(3, 4), I(1, 2, high=4)), {"axis": 1}),
        Case("vector", args(N(4), I(6, high=4)), {"axis": 0})],
    "scatter": scatters(repeats=False),
    "scatter_add": scatters(repeats=True) + [
        Case("repeats", lambda rng: [rng.normal(size=(2, 3)), np.array([[1, 1, 1, 0], [2, 0, 2, 2]]),
                                     rng.normal(size=(2, 4))], {"axis": 1})],
    "scatter_reduce": scatter_reductions(),
    # neural
    "softmax": along_axis(),
    "log_softmax": along_axis(),
    "layer_norm": [Case(f"{list(s)}", args(N(*s), N(4), N(4))) for s in ((4,), (3, 4), (1, 4), (2, 3, 4))],
    "cross_entropy": [Case("[3, 4]", args(N(3, 4), I(3, high=4))),
                      Case("[1, 4]", args(N(1, 4), I(1, high=4))),
                      Case("repeated-labels", lambda rng: [rng.normal(size=(5, 3)), np.array([0, 0, 2, 2, 1])]),
                      Case("ignored", lambda rng: [rng.normal(size=(4, 3)), np.array([2, -100, 0, -100])],
                           {"ignore_index": -100}),
                      Case("ignored-class", args(N(5, 3), I(5, high=3)), {"ignore_index": 1})],
    "mse": [Case(f"{list(s)}", normal(s, s)) for s in SHAPES] + [
        Case("broadcast", normal((3, 4), (1, 4)))],
    "binary_cross_entropy": [Case(f"{list(s)}", args(U(*s), U(*s, lo=0, hi=1))) for s in SHAPES] + [
        Case("hard-labels", args(U(3, 4), B(3, 4))),
        Case("broadcast", args(U(1, 4), U(3, 4, lo=0, hi=1))),
        Case("sum", args(U(3, 4), U(3, 4, lo=0, hi=1)), {"reduction": "sum"}),
        Case("none", args(U(3, 4), U(3, 4, lo=0, hi=1)), {"reduction": "none"}),
        Case("none-broadcast", args(U(3, 1), U(3, 4, lo=0, hi=1)), {"reduction": "none"})],
    "dropout": unary(p=0.3, seed=1) + [Case("no-drop", normal((3, 4)), {"p": 0.0}),
                                       Case("all-drop", normal((3, 4)), {"p": 1.0})],
    "conv2d": [Case("basic", normal((2, 3, 5, 5), (4, 3, 3, 3))),
               Case("stride-pad", normal((1, 2, 5, 6), (3, 2, 3, 3)), {"stride": 2, "padding": 1}),
               Case("pairs", normal((1, 2, 5, 6), (2, 2, 2, 3)), {"stride": (1, 2), "padding": (2, 0)}),
               Case("1x1", normal((2, 4, 3, 3), (1, 4, 1, 1))),
               Case("row", normal((1, 1, 1, 4), (2, 1, 1, 2)))],
    "max_pool2d": pooling(),
    "avg_pool2d": pooling(),
    "conv3d": [Case("basic", normal((2, 2, 4, 4, 4), (3, 2, 2, 3, 2))),
               Case("stride-pad", normal((1, 2, 5, 4, 6), (2, 2, 3, 3, 3)), {"stride": 2, "padding": 1}),
               Case("triples", normal((1, 1, 4, 5, 6), (2, 1, 2, 2, 3)), {"stride": (1, 2, 3), "padding": (0, 1, 2)}),
               Case("stride-over-kernel", normal((1, 2, 5, 5, 5), (1, 2, 1, 2, 1)), {"stride": 3})],
    "max_pool3d": pooling3d(),
    "avg_pool3d": pooling3d(),
    "grid_sample": grid_samples(),
    "one_hot": [Case("[]", args(I(high=4)), {"n": 4}), Case("[4]", args(I(4, high=3)), {"n": 3}),
                Case("[3, 4]", args(I(3, 4, high=5)), {"n": 5}), Case("[1, 4]", args(I(1, 4, high=2)), {"n": 2})],
    # gradient control
    "linear": [Case("2d", normal((3, 4), (2, 4), (2,))), Case("batched", normal((2, 3, 4), (5, 4), (5,))),
               Case("vector", normal((4,), (2, 4), (2,)))],
    "embedding": [Case("1d", args(I(3, high=5), N(5, 4))), Case("2d", args(I(2, 3, high=5), N(5, 2))),
                  Case("repeated", lambda rng: [np.array([1, 1, 3]), rng.normal(size=(4, 3))]),
                  Case("padding-unread", args(I(2, 3, high=4), N(5, 2)), {"padding_idx": 4})],
    "batch_norm": [Case("2d", normal((5, 3), (3,), (3,))), Case("4d", normal((2, 3, 2, 2), (3,), (3,))),
                   Case("batch-of-one", normal((1, 3, 4), (3,), (3,))),
                   Case("eps", normal((4, 2), (2,), (2,)), {"eps": 1e-3})],
    "scaled_dot_product_attention": [
        Case("3d", normal((2, 3, 4), (2, 5, 4), (2, 5, 3))),
        Case("causal-square", normal((2, 4, 4), (2, 4, 4), (2, 4, 2)), {"is_causal": True}),
        Case("causal-L<S", normal((1, 2, 4), (1, 5, 4), (1, 5, 3)), {"is_causal": True}),
        Case("causal-L>S", normal((3, 2), (2, 2), (2, 3)), {"is_causal": True}),
        Case("scale", normal((3, 4), (3, 4), (3, 2)), {"scale": 0.3}),
        Case("heads-broadcast", normal((2, 2, 3, 4), (2, 1, 3, 4), (1, 2, 3, 4)))],
    "masked_attention": [
        Case("int-mask", lambda rng: [rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 4)),
                                      rng.normal(size=(2, 5, 3)), np.tril(np.ones((3, 5), dtype=np.int64), 1)]),
        Case("float-mask", args(N(2, 3, 4), N(2, 5, 4), N(2, 5, 3), N(3, 5))),
        Case("row-mask", lambda rng: [rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2)),
                                      np.array([[1, 0, 1, 1, 0]])], {"scale": 0.5})],
    "cosine_similarity": [Case("rows", normal((3, 4), (3, 4))), Case("axis-1", normal((3, 4), (3, 4)), {"axis": -1}),
                          Case("broadcast", normal((3, 4), (1, 4)), {"axis": 1}),
                          Case("zero-vector", lambda rng: [np.zeros((2, 3)), rng.normal(size=(2, 3))], {"eps": 1e-3})],
    "flatten": [Case("all", normal((2, 3, 4))), Case("from1", normal((2, 3, 4)), {"start_dim": 1}),
                Case("middle", normal((2, 3, 4, 5)), {"start_dim": 1, "end_dim": 2}), Case("scalar", normal(()))],
    "permute": [Case("3d", normal((2, 3, 4)), {"dims": (2, 0, 1)}), Case("negative", normal((2, 3)), {"dims": (-1, 0)})],
    "no_grad": unary(),
    "stop_gradient": unary(),
    "grad_scale": unary(s=0.5) + [Case("negative", normal((3, 4)), {"s": -2.0})],
    "grad_reverse": unary(),
    # linear algebra
    "inv": square_matrices(),
    "det": square_matrices(),
    "logabsdet": square_matrices(),
    "det_sign": square_matrices(),
    "logdet": square_matrices(flip=False),
    "cholesky": square_matrices(spd=True, flip=False) + [Case("upper", args(matrices(2, 3, 3, spd=True)),
                                                              {"upper": True})],
    "solve": [Case("matrix", args(matrices(3, 3), N(3, 2))), Case("vector", args(matrices(3, 3), N(3))),
              Case("batch-of-vectors", args(matrices(2, 3, 3), N(2, 3))),
              Case("vector-broadcast", args(matrices(2, 3, 3), N(3))),
              Case("matrix-broadcast", args(matrices(3, 3), N(2, 3, 4))), Case("1x1", args(matrices(1, 1), N(1)))],
    "solve_triangular": triangular_solves(),
    "eigvalsh": spectral(symmetric=True),
    "eigvecsh": spectral(symmetric=True),
    "svdvals": spectral(),
    "svd_u": spectral(full=True),
    "svd_vh": spectral(full=True),
    "qr_q": spectral(),
    "qr_r": spectral(),
    "matrix_exp": [Case("[3, 3]", args(N(3, 3))), Case("[1, 1]", args(N(1, 1))),
                   Case("squared-twice", args(lambda rng: 3 * rng.normal(size=(2, 3, 3)))),
                   Case("zeros", lambda rng: [np.zeros((2, 2))])],
    "inv_ex": square_matrices(),
    "inv_ex_info": square_matrices(),
    "cholesky_ex": square_matrices(spd=True, flip=False) + [Case("upper", args(matrices(2, 3, 3, spd=True)),
                                                                 {"upper": True})],
    "cholesky_ex_info": square_matrices(spd=True, flip=False),
    # non-differentiable
    "argmax": arg_reduction(),
    "argmin": arg_reduction(),
    "argsort": along_axis() + [Case("descending", normal((3, 4)), {"descending": True}),
                               Case("ties", lambda rng: [np.array([[1.0, 3.0, 1.0, 3.0], [2.0, 2.0, 0.0, 2.0]])],
                                    {"axis": 1, "descending": True})],
    "cumargmax": scan(),
    "cumargmin": scan(),
    "searchsorted": [Case("[4]-[]", args(sorted_boundaries(4), N())),
                     Case("[5]-[3, 4]", args(sorted_boundaries(5), N(3, 4))),
                     Case("right", args(sorted_boundaries(5), N(3, 4)), {"right": True}),
                     Case("rows", args(sorted_boundaries(3, 5), N(3, 4)), {"right": True}),
                     Case("ties", lambda rng: [np.array([1.0, 2.0, 2.0, 3.0]), np.array([0.5, 1.0, 2.0, 3.0, 4.0])]),
                     Case("ties-right", lambda rng: [np.array([1.0, 2.0, 2.0, 3.0]), np.array([0.5, 1.0, 2.0, 3.0, 4.0])],
                          {"right": True}),
                     Case("int", lambda rng: [np.sort(rng.integers(0, 9, size=6)), rng.integers(0, 10, size=(3, 4))])],
    "round": unary(),
    "to_int": unary() + [Case("ints", args(I(3, 4, high=5)))],
    "floor": unary(),
    "ceil": unary(),
    "trunc": unary(),
    "sign": unary(),
    "floor_divide": rounding_divisions(),
    "trunc_divide": rounding_divisions(),
    "less": binary(),
    "less_equal": binary(),
    "greater": binary(),
    "greater_equal": binary(),
    "equal": binary() + [Case("ints", args(I(3, 4, high=2), I(4, high=2)))],
    "not_equal": binary(),
    "bernoulli": [Case("[]", args(U()), {"seed": 1}), Case("[3, 4]", args(U(3, 4))),
                  Case("edges", lambda rng: [np.array([0.0, 1.0, 0.5])], {"seed": 2})],
    "normal": [Case(f"{list(a)}-{list(b)}", args(N(*a), U(*b))) for a, b in
               [((), ()), ((3, 4), (3, 4)), ((3, 4), (1, 4)), ((4,), (3, 4)), ((3, 4), ())]]
              + [Case("seeded", args(N(3, 4), U(4)), {"seed": 5})],
    "multinomial": [Case("[5]", args(U(5)), {"n": 3}), Case("[3, 4]-replacement", args(U(3, 4)),
                                                            {"n": 6, "replacement": True, "seed": 1}),
                    Case("[2, 3, 4]", args(U(2, 3, 4)), {"n": 4, "seed": 2})],
}


# Ops whose gradient is deliberately not the derivative of their (identity) forward:
# the factor between the tape's gradient and the finite difference.
GRADIENT_FACTOR = {"grad_scale": lambda attrs: attrs["s"], "grad_reverse": lambda attrs: -1.0}


def all_cases():
    for name, cases in CASES.items():
        for case in cases:
            yield pytest.param(name, case, id=f"{name}-{case.id}")


def scalar_of(name, arrays, attrs, weights):
    """sum(weights * op(*arrays)) on a fresh eager tape; returns (tape, inputs, loss)."""
    tape = Tape()
    inputs = [tape.param(a) if np.asarray(a).dtype.kind == "f" else tape.leaf(a) for a in arrays]
    out = tape.apply(name, *inputs, **attrs)
    loss = tape.apply("sum", out * tape.constant(weights))
    return tape, inputs, loss


def eager_output(name, arrays, attrs):
    tape = Tape()
    return tape.apply(name, *[tape.leaf(a) for a in arrays], **attrs)


def finite_difference(name, arrays, attrs, weights, k, eps=1e-6):
    grad = np.zeros_like(arrays[k])
    for i in np.ndindex(np.shape(arrays[k])):
        values = []
        for sign in (1, -1):
            shifted = [np.array(a, copy=True) for a in arrays]
            shifted[k][i] += sign * eps
            values.append(scalar_of(name, shifted, attrs, weights)[2].value)
        grad[i] = (values[0] - values[1]) / (2 * eps)
    return grad


@pytest.mark.parametrize("name,case", list(all_cases()))
def test_op_gradient_matches_finite_differences(name, case):
    rng = np.random.default_rng(0)
    arrays = [np.asarray(a) for a in case.make(rng)]
    weights = rng.normal(size=eager_output(name, arrays, case.attrs).shape)
    tape, inputs, loss = scalar_of(name, arrays, case.attrs, weights)
    grads = tape.backward(loss)
    for k, (x, rule) in enumerate(zip(inputs, OPS[name].vjps_for(len(inputs)))):
        got = grads[x.index]
        if rule is None or not x.requires_grad:
            assert got is None, f"input {k} of {name} must receive no gradient"
            continue
        expected = finite_difference(name, arrays, case.attrs, weights, k)
        expected = expected * GRADIENT_FACTOR.get(name, lambda attrs: 1.0)(case.attrs)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=f"input {k}")
        assert np.shape(got) == x.shape


@pytest.mark.parametrize("name,case", list(all_cases()))
def test_op_shape_rule_matches_forward(name, case):
    arrays = [np.asarray(a) for a in case.make(np.random.default_rng(0))]
    eager = eager_output(name, arrays, case.attrs)
    lazy_tape = Tape(eager=False)
    lazy = lazy_tape.apply(name, *[lazy_tape.leaf(shape=a.shape, dtype=a.dtype) for a in arrays],
                           **case.attrs)
    assert lazy.shape == eager.shape
    assert lazy.dtype == eager.dtype


def test_embedding_padding_row_is_read_but_gets_no_gradient():
    """torch's padding_idx: its row's gradient is zero, the finite difference is not (so no table row)."""
    rng = np.random.default_rng(0)
    idx, table = np.array([[0, 2], [2, 0]]), rng.normal(size=(3, 4))
    weights = rng.normal(size=(2, 2, 4))
    for pad, row in ((0, 0), (-1, 2)):
        tape, (_, w), loss = scalar_of("embedding", [idx, table], {"padding_idx": pad}, weights)
        np.testing.assert_array_equal(eager_output("embedding", [idx, table], {"padding_idx": pad}).value, table[idx])
        expected = finite_difference("embedding", [idx, table], {}, weights, 1)
        assert expected[row].any()
        expected[row] = 0
        np.testing.assert_allclose(tape.backward(loss)[w.index], expected, rtol=1e-5, atol=1e-6)
        assert not OPS["embedding"].derives({"padding_idx": pad}) and OPS["embedding"].derives({"padding_idx": None})


@pytest.mark.parametrize("pad", [3, -4, 1.0, True])
def test_embedding_padding_idx_must_be_a_row_of_weight(pad):
    tape = Tape(eager=False)
    with pytest.raises(ShapeError, match="padding_idx must be a row of weight"):
        tape.apply("embedding", tape.leaf(shape=(2,), dtype=np.int64), tape.leaf(shape=(3, 4)), padding_idx=pad)


@pytest.mark.parametrize("name,shapes,attrs,message", [
    ("cumsum", [()], {"axis": 0}, "cumsum: needs a tensor of at least one axis, got a scalar"),
    ("argsort", [(3, 4)], {"axis": 2}, "argsort: axis 2 is out of range for shape [3, 4]"),
    ("scatter", [(3, 4), (3,), (3,)], {"axis": 1}, "scatter into [3, 4] at index [3]: the index needs 2 axes, at least one"),
    ("scatter", [(3, 4), (4, 1), (4, 1)], {"axis": 1},
     "scatter into [3, 4] at index [4, 1]: the index is longer than x along an axis other than 1"),
    ("scatter_add", [(3, 4), (3, 2), (3, 3)], {"axis": 1},
     "scatter_add: scatter into [3, 4] at index [3, 2]: values [3, 3] do not broadcast to the index's shape"),
    ("scatter_add", [(3, 4), (3, 2), (1, 3, 2)], {"axis": 1},
     "scatter_add: scatter into [3, 4] at index [3, 2]: values [1, 3, 2] do not broadcast to the index's shape"),
])
def test_scan_and_scatter_shape_rules_refuse_what_torch_refuses(name, shapes, attrs, message):
    tape = Tape(eager=False)
    leaves = [tape.leaf(shape=shapes[0])] + [tape.leaf(shape=s, dtype=np.int64 if k == 0 else None)
                                            for k, s in enumerate(shapes[1:])]
    with pytest.raises(ShapeError) as caught:
        tape.apply(name, *leaves, **attrs)
    assert str(caught.value) == message


def test_cross_entropy_with_every_label_ignored_is_nan_with_no_gradient():
    tape, (logits, _), loss = scalar_of("cross_entropy", [np.ones((2, 3)), np.array([-1, -1])], {"ignore_index": -1},
                                        np.array(1.0))
    assert np.isnan(loss.value)
    np.testing.assert_array_equal(tape.backward(loss)[logits.index], np.zeros((2, 3)))


def test_cross_entropy_checks_the_labels_it_does_not_ignore():
    tape = Tape()
    with pytest.raises(IndexError, match="label -100 is out of range"):
        tape.apply("cross_entropy", tape.leaf(np.ones((2, 3))), tape.leaf(np.array([-100, 1])), ignore_index=-1)
    lazy = Tape(eager=False)
    with pytest.raises(ShapeError, match="ignore_index must be an integer"):
        lazy.apply("cross_entropy", lazy.leaf(shape=(2, 3)), lazy.leaf(shape=(2,), dtype=np.int64), ignore_index=0.5)


def test_every_op_has_a_gradient_test_row():
    assert set(OPS) - set(CASES) == set()


def test_every_required_attribute_is_exercised():
    for name, op in OPS.items():
        required = {k for k, v in op.attrs.items() if v is REQUIRED}
        for case in CASES[name]:
            assert required <= set(case.attrs), f"{name} case {case.id} lacks {required}"


@pytest.mark.parametrize("name", sorted(OPS))
def test_has_rule_says_which_inputs_vjps_for_gives_a_rule(name):
    op = OPS[name]
    n = 3 if op.variadic else len(op.inputs)
    assert [op.has_rule(k) for k in range(n)] == [rule is not None for rule in op.vjps_for(n)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,case", [p for p in all_cases() if OPS[p.values[0]].fitted])
def test_fitted_ops_need_no_fitting_of_values_or_gradients(name, case, dtype):
    """The tape takes a fitted op's shape from its input and its rule's gradient as it is:
    both must be what reading the value's shape and fitting the gradient would give."""
    rng = np.random.default_rng(0)
    tape = Tape(dtype)
    x = tape.param(case.make(rng)[0])
    out = tape.apply(name, x)
    assert out.shape == np.shape(out.value) == x.shape and out.dtype == x.dtype
    rule, g = OPS[name].vjps[0], rng.normal(size=out.shape).astype(dtype)
    if rule is None:
        return
    alone = rule(g, out.value, x.value)
    assert np.shape(alone) == x.shape and alone.dtype == x.dtype
    general = [None] * len(tape.nodes)
    pass_on(out, g, general, through=False)   # the sweep's path for ops that are not fitted
    np.testing.assert_array_equal(tape.sweep(None, seeds={out: g})[x.index], fit(alone, x))
    np.testing.assert_array_equal(tape.sweep(None, seeds={out: g})[x.index], general[x.index])
