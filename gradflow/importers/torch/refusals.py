"""What the importer refuses while export runs the user's forward, and export's own failures in
the user's words.

A gradient inside the step (``torch.autograd.grad``, ``.backward()``) and a gradient hook are
refused where the user's code calls them: export records neither. When export itself fails,
``export_message`` says why in terms of the user's code, recognising the frames the error
passed through (a PackedSequence, a distribution's argument checks, a cumulative batch norm).
"""

from __future__ import annotations

import inspect
import sys

import torch

from gradflow.errors import ModelError
from gradflow.importers.document import Source
from gradflow.importers.torch.places import display, exit_call, frame_source, is_user_frame


def refused_in_forward(real, message: str):
    """``real`` refused with ``message`` where the user's forward calls it; torch's own calls pass."""
    def call(*args, **kwargs):
        caller = sys._getframe(1)
        if not is_user_frame(caller):
            return real(*args, **kwargs)
        at = frame_source(caller)
        raise ModelError(message, display(at.path), at.line, at.col)
    return call


def autograd_refused(grad, backward):
    """torch.autograd.grad and Tensor.backward refused where the user's forward calls them (a
    gradient penalty, R1): export cannot trace a gradient inside the step, and fails later with
    words of its own about fake tensors."""
    def refuse(real, spelled):
        return refused_in_forward(real, f"{spelled} in the step's forward cannot be imported: gradflow analyses "
                                        "a step's first-order gradients, not gradients of gradients (a gradient "
                                        "penalty, R1); leave the penalty out of the step checked, or compute it "
                                        "outside forward")
    return refuse(grad, "torch.autograd.grad()"), refuse(backward, ".backward()")


HOOKS = ("export does not record hooks, so gradflow would report the gradient as if it were not there; "
         "leave the hook out of the step checked (behind a flag, say)")


def hook_refused(register):
    """Tensor.register_hook refused in the user's forward: the hook may change the gradient."""
    return refused_in_forward(register, f"a gradient hook cannot be imported: {HOOKS}")


def hooks_refused(module: torch.nn.Module, fallback: Source) -> None:
    """Gradient hooks already on the step's parameters or modules, or on every module, refused
    where the hook is defined (else at FUNC's def line): what a hook does to a gradient, export
    does not see."""
    hooked = [(f"parameter {name!r}", p._backward_hooks) for name, p in module.named_parameters() if p.requires_grad]
    hooked += [(f"module {name!r}" if name else "the step's module", {**m._backward_hooks, **m._backward_pre_hooks})
               for name, m in module.named_modules()]
    hooked.append(("every module", {**torch.nn.modules.module._global_backward_hooks,
                                    **torch.nn.modules.module._global_backward_pre_hooks}))
    for what, hooks in hooked:
        if hooks:
            hook = next(iter(hooks.values()))
            code = getattr(inspect.unwrap(getattr(hook, "func", hook)), "__code__", None)   # a partial's function
            at = Source(code.co_filename, code.co_firstlineno, 1) if code else fallback
            raise ModelError(f"a gradient hook on {what} cannot be imported: {HOOKS}", display(at.path),
                             at.line, at.col)


def export_message(error: BaseException) -> str:
    if isinstance(error, SystemExit):
        return f"the step's forward {exit_call(error)}"
    text = str(error).strip().splitlines()
    first = text[0] if text else type(error).__name__
    if ".data" in str(error) or "set_data" in str(error):
        return "torch.export cannot trace '.data'; use '.detach()' to cut the gradient"
    tb, guarded = error.__traceback__, type(error).__name__ == "GuardOnDataDependentSymNode"
    if passed_through(tb, holding_packed_sequence):
        return ("a PackedSequence cannot be imported (export cannot trace it): pass the padded batch to the "
                "layer and mask the padded steps out of the loss")
    if type(error).__name__ == "DynamicOutputShapeException" and "_ctc_loss" in first:
        return ("F.ctc_loss cannot be imported: torch.export cannot capture aten._ctc_loss, whose alignment "
                "table's size depends on the target lengths' values, and gradflow has no CTC op")
    if guarded and passed_through(tb, lambda frame: frame.f_code.co_name == "gaussian_nll_loss"):
        return ("F.gaussian_nll_loss with a tensor var cannot be imported: it checks that var is not negative "
                "with an `if` on its values, which export cannot trace; write the loss out, "
                "0.5 * (torch.log(var) + (input - target) ** 2 / var) and its mean, with var kept positive")
    if guarded and passed_through(tb, cumulative_batch_norm):
        return ("a batch norm with momentum=None cannot be imported: its cumulative average reads "
                "num_batches_tracked as a Python number, which export cannot trace; give momentum a number for "
                "the check (in training mode it changes only the running statistics, never a gradient)")
    if guarded and passed_through(tb, checked_distribution):
        return ("torch.export could not capture the step: this distribution checks its arguments' values "
                "(validate_args=True), which export cannot trace; pass validate_args=False")
    if guarded:   # torch's words: "guard on data-dependent expression u0"
        return ("torch.export could not capture the step: what this line does depends on a tensor's values "
                "(a Python `if` on one, `.item()`, or a size such as F.one_hot's without num_classes); "
                "compute it without them (torch.where, an explicit size)")
    return f"torch.export could not capture the step: {type(error).__name__}: {first}"


def passed_through(tb, found) -> bool:
    """Did the error pass through a frame for which ``found(frame)`` holds?"""
    while tb is not None:
        if found(tb.tb_frame):
            return True
        tb = tb.tb_next
    return False


def checked_distribution(frame) -> bool:
    """Is this a distribution's frame, checking its arguments' values (validate_args=True)?"""
    owner = frame.f_locals.get("self")
    return isinstance(owner, torch.distributions.Distribution) and owner._validate_args


def cumulative_batch_norm(frame) -> bool:
    """Is this a batch norm's frame, averaging its statistics cumulatively (momentum=None)?"""
    owner = frame.f_locals.get("self")
    return isinstance(owner, torch.nn.modules.batchnorm._NormBase) and owner.momentum is None


def holding_packed_sequence(frame) -> bool:
    """Does this frame hold a PackedSequence (pack_padded_sequence into an LSTM)?"""
    return any(isinstance(v, torch.nn.utils.rnn.PackedSequence) for v in frame.f_locals.values())
