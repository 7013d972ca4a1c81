"""gradcheck: the tape's gradients against central finite differences, on the model itself.

For every loss and every parameter that receives gradient, a few entries (all of
them for small parameters) are nudged by +eps and -eps and the forward pass is
run again. The outputs of stop-gradients and of non-differentiable ops are held
at their values during those runs: that is the function the tape differentiates
(a straight-through estimator is not the derivative of its forward value, and is
not meant to be). A pair whose gradient passes grad_scale, grad_reverse or an
embedding with padding_idx (whose row is read but not trained, as torch's) on its
way to the parameter is skipped, with that reason: its tape gradient is
deliberately not a derivative. Every other pair of the same loss is compared.
A model whose gradients disagree has an op rule gradflow gets wrong, or sits on
a kink (a ReLU or max exactly at a tie) where no derivative exists.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradflow.engine import quiet


@dataclass
class Check:
    """One (loss, parameter) pair: the tape's gradient against central differences, where they differ most."""
    loss: str
    param: str
    entries: int                  # how many entries were nudged
    max_abs_error: float
    worst: tuple                  # index of the worst entry
    tape: float                   # the tape's value there
    numeric: float                # the finite-difference value there
    ok: bool
    skipped: str = ""             # why this pair was not compared


def forward_again(model) -> None:
    """Recompute every differentiable op; cut ops keep the values they had."""
    for node in model.tape.nodes:
        if node.op is not None and node.op.kind == "differentiable":
            node.value = None
    model.tape.run()


def loss_at(model, param, index, value, loss) -> float:
    param.value[index] = value
    forward_again(model)
    return float(loss.value)


def gradcheck(model, eps: float = 1e-6, rtol: float = 1e-4, atol: float = 1e-7,
              samples: int = 8, seed: int = 0) -> list:
    """One Check per (loss, parameter) pair that receives gradient."""
    with quiet():   # NaN and overflow show as failed checks, not as numpy's warnings
        return check_pairs(model, eps, rtol, atol, samples, seed)


def check_pairs(model, eps, rtol, atol, samples, seed) -> list:
    model.materialize()
    for param in model.params.values():     # nudged in place: own the arrays first
        param.value = np.array(param.value, copy=True)
    rng = np.random.default_rng(seed)
    checks = []
    for loss_name, loss in model.losses.items():
        grads = model.tape.backward(loss, keep=True)   # rescaling nodes on the way are looked at
        rescaled = rescaled_params(model, grads, loss)
        for name, param in model.params.items():
            g = grads[param.index] if param.index < len(grads) else None
            if g is None:
                continue
            if param.index in rescaled:
                checks.append(Check(loss_name, name, 0, 0.0, (), 0.0, 0.0, True,
                                    f"{rescaled[param.index]} on the way: its gradient is not a derivative"))
                continue
            picks = rng.permutation(param.size)[:samples] if param.size > samples else range(param.size)
            indices = [tuple(int(i) for i in np.unravel_index(k, param.shape)) for k in picks]
            checks.append(compare(model, loss, loss_name, name, param, np.broadcast_to(g, param.shape),
                                  indices, eps, rtol, atol))
    return checks


def rescaled_params(model, grads: list, loss) -> dict:
    """Tape index of each parameter whose gradient passes a rescaling op (grad_scale,
    grad_reverse, embedding with padding_idx) -> that op's name: the nodes upstream of one
    that gradient reached."""
    found = {}
    for node in reversed(model.tape.nodes[:loss.index + 1]):
        if node.op is None or node.op.derives(node.attrs) or grads[node.index] is None:
            continue
        # an op that is a derivative but for some attributes (embedding's padding_idx) says which
        what = node.op.name if not callable(node.op.derivative) else \
            f"{node.op.name}({', '.join(f'{k}={v!r}' for k, v in node.attrs.items())})"
        stack, seen = list(node.parents), set()
        while stack:
            current = stack.pop()
            if current.index in seen or not current.requires_grad:
                continue
            seen.add(current.index)
            if current.op is None:
                found.setdefault(current.index, what)
            stack.extend(current.parents)
    return found


def compare(model, loss, loss_name, name, param, g, indices, eps, rtol, atol) -> Check:
    """Nudge each index of ``param`` both ways; keep the worst disagreement."""
    worst = Check(loss_name, name, len(indices), -1.0, (), 0.0, 0.0, True)
    for index in indices:
        original = param.value[index].copy()
        up = loss_at(model, param, index, original + eps, loss)
        down = loss_at(model, param, index, original - eps, loss)
        param.value[index] = original
        numeric, tape = (up - down) / (2 * eps), float(g[index])
        error = abs(tape - numeric)
        ok = error <= atol + rtol * max(abs(tape), abs(numeric))
        if error > worst.max_abs_error:
            worst = Check(loss_name, name, len(indices), error, index, tape, numeric, worst.ok and ok)
        worst.ok = worst.ok and ok
    forward_again(model)
    return worst
