"""Custom ``torch.autograd.Function`` calls: classified by probing their backward.

Export inlines a Function's forward, which says nothing of its gradient (a
gradient reversal is ``view_as``, a straight-through round is ``round``). So
each Function is run again on random float64 tensors (a draw, its negation and
the draw a thousandfold, which must agree) and its backward is compared with the
incoming gradient: ``-g`` is a reversal, ``c * g`` a scale,
``g`` around a forward that changes values a straight-through estimator.
Anything else is refused at the ``.apply`` call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gradflow.errors import ModelError
from gradflow.importers.torch.places import display

KNOWN = ("gradient reversal (backward -g), scaling (backward c * g) and straight-through "
         "estimators (backward g)")


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument of a Function call, by its shape and dtype."""
    shape: tuple
    dtype: torch.dtype


@dataclass(frozen=True)
class Kind:
    """What a Function does to the gradient: 'reverse', 'scale' (by factor) or 'straight'."""
    name: str
    factor: float = 1.0


def refusal(call, why: str) -> ModelError:
    """The located error refusing one recorded Function call, saying why."""
    at = call.source
    return ModelError(f"custom autograd Function {call.cls.__name__!r} cannot be analysed: {why}; "
                      f"gradflow recognises {KNOWN}", display(at.path) if at else None,
                      at.line if at else 1, at.col if at else 1)


def classify(call) -> Kind:
    """The Kind of one recorded Function call, or a located ModelError."""
    def refuse(why: str):
        return refusal(call, why)
    generator = torch.Generator().manual_seed(0)
    args = [probe_value(a, generator) for a in call.args]
    floats = sum(1 for a in args if isinstance(a, torch.Tensor) and a.requires_grad)
    if floats != 1:
        raise refuse(f"it takes {floats} floating-point tensors, not one")
    # one draw may miss what the real values meet (a one-element x > 0 hides a relu's mask, small
    # values a clamp): the draw, its negation and the draw a thousandfold must all agree
    runs = [probe(call, args, scale, generator, refuse) for scale in (1.0, -1.0, 1000.0)]
    factor = runs[0][0]
    if not all(math.isclose(f, factor, rel_tol=1e-9, abs_tol=1e-12) for f, _ in runs):
        raise refuse("its backward scales the gradient differently for different inputs")
    if all(same for _, same in runs):
        return Kind("reverse") if math.isclose(factor, -1.0) else Kind("scale", factor)
    if math.isclose(factor, 1.0):
        return Kind("straight")
    raise refuse("its forward changes the values and its backward scales the gradient")


def probe(call, args, scale: float, generator, refuse) -> tuple:
    """(factor, unchanged) of one run on the drawn tensors times ``scale``: the constant its backward
    multiplies the incoming gradient by (else refused), and whether its output equals its input."""
    x = next(a for a in args if isinstance(a, torch.Tensor) and a.requires_grad)
    x = (x.detach() * scale).requires_grad_()
    try:
        with torch.enable_grad():
            # the Function is given x computed from the leaf, as in a model: a leaf that needs
            # gradient may not be written, and a Function that writes its input is refused for that
            args = [x.clone() if isinstance(a, torch.Tensor) and a.requires_grad else a for a in args]
            out = call.cls.apply(*args)
            if any(out is a for a in args):   # torch then reads the input through the Function; export does not
                raise refuse("it writes its input in place and returns it (ctx.mark_dirty); write into "
                             "x.clone() and return that instead")
            incoming = torch.randn(out.shape, dtype=out.dtype, generator=generator)
            (grad,) = torch.autograd.grad(out, [x], incoming, allow_unused=True)
    except ModelError:
        raise
    except Exception as e:   # the user's Function failed on a probe: refuse rather than guess
        raise refuse(f"probing its backward raised {type(e).__name__}: {e}") from None
    if grad is None or grad.shape != x.shape or out.shape != x.shape:
        raise refuse("its backward gives no gradient of the input's shape")
    factor = float((grad * incoming).sum() / (incoming * incoming).sum())
    if not torch.allclose(grad, factor * incoming, rtol=1e-9, atol=1e-12):
        raise refuse("its backward is not a constant multiple of the incoming gradient")
    return factor, torch.equal(out.detach(), x.detach())


def probe_value(arg, generator):
    if not isinstance(arg, TensorArg):
        return arg
    if arg.dtype.is_floating_point:
        return torch.randn(arg.shape, dtype=torch.float64, generator=generator).requires_grad_()
    return torch.zeros(arg.shape, dtype=arg.dtype)
