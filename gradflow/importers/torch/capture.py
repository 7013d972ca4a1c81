"""Capture a training step with torch.export (non-strict, training IR, never decomposed).

While export traces the user's code, the importer watches it: every graph node
gets the user's source place, nodes made with gradient off get the place of the
``with`` that turned it off, and each custom ``torch.autograd.Function`` call is
fenced by two marker ops so its inlined forward can be found and replaced. The
user's ``.data`` is traced as a marked ``.detach()``. ``torch.distributions`` do not check
their arguments' values while export runs (see ``watching``). What export cannot record (a
gradient inside the step, a hook) is refused at the user's line, and export's own failures
read in the user's words (``refusals.py``).
"""

from __future__ import annotations

import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.fx
import torch.utils.checkpoint

from gradflow.errors import ModelError
from gradflow.importers.document import Source
from gradflow.importers.torch.functions import TensorArg, refusal
from gradflow.importers.torch.places import (display, frame_source, is_user_frame, set_by_user, set_in_user_code,
                                             user_source, users_failure)
from gradflow.importers.torch.refusals import autograd_refused, export_message, hook_refused, hooks_refused

SOURCE = "gradflow_source"     # node.meta key: the user's Source
BLOCK = "gradflow_block"       # node.meta key: index of the no_grad block it was made in
DATA = "gradflow_data"         # node.meta key: the detach is the user's `.data`
GRAD_OFF = "gradflow_grad_off" # node.meta key: made with gradient off (in a block export may not have kept)
FROZEN = "gradflow_frozen"     # node.meta key: {parameter: Source} of those forward had set requires_grad=False


@torch.library.custom_op("gradflow::function_input", mutates_args=())
def function_input(x: torch.Tensor, call: int) -> torch.Tensor:
    """Marks a tensor entering a custom autograd.Function call (identity)."""
    return x.clone()


@torch.library.custom_op("gradflow::function_output", mutates_args=())
def function_output(x: torch.Tensor, call: int) -> torch.Tensor:
    """Marks a tensor leaving a custom autograd.Function call (identity)."""
    return x.clone()


for _marker in (function_input, function_output):
    _marker.register_fake(lambda x, call: torch.empty_like(x))
    _marker.register_autograd(lambda ctx, grad: (grad, None))


@dataclass
class FunctionCall:
    """One ``SomeFunction.apply(...)`` seen while tracing."""
    cls: type
    source: Source | None
    args: list                       # non-tensor arguments as given, tensors as their (shape, dtype)


@dataclass
class Recorder:
    """What the importer saw while export ran the user's code."""
    blocks: list = field(default_factory=list)   # Source of each `with` that turned gradient off
    libraries: set = field(default_factory=set)  # indices of blocks a library turned off, not the user's code
    calls: list = field(default_factory=list)    # [FunctionCall]
    depth: int = 0                                # inside a Function's forward
    boundary: object = None                       # the importer's frame: user code runs below it
    data: bool = False                            # inside the user's `.data`
    module: object = None                         # the step's module, whose parameters forward may freeze
    # parameter name -> Source where forward set requires_grad=False, or None: frozen when forward started;
    # a new dict at each change, so that nodes share it
    frozen: dict = field(default_factory=dict)
    woken: set = field(default_factory=set)       # parameters forward set trainable while they were frozen
    last: dict = field(default_factory=dict)      # parameter name -> requires_grad as forward left it

    def stamp(self, node, target, args) -> None:
        source = user_source(3, self.boundary)
        if source is not None:
            node.meta[SOURCE] = source
        if self.data:
            node.meta[DATA] = True
        if self.frozen:
            node.meta[FROZEN] = self.frozen
        if target is torch._C._set_grad_enabled and args and args[0] is False:
            if not set_in_user_code(3):
                self.libraries.add(len(self.blocks))
            self.blocks.append(source)
        elif self.depth == 0 and not torch.is_grad_enabled():
            node.meta[GRAD_OFF] = True
            if self.blocks:
                node.meta[BLOCK] = len(self.blocks) - 1


def requires_grad_watched(recorder: Recorder):
    """Tensor.requires_grad's setter and requires_grad_ noting where the user's forward turns a
    parameter's gradient off and on again (pix2pix's set_requires_grad(netD, False) before the
    generator's loss), which export does not record: the uses in between are cut, and so are
    the uses of a parameter frozen when forward starts made before forward sets it trainable.
    What forward leaves it as is what backward finds: torch accumulates no gradient into a
    parameter whose requires_grad is False then."""
    base = torch._C.TensorBase.requires_grad
    method = torch._C.TensorBase.requires_grad_

    def note(tensor, flag) -> None:
        if recorder.module is None or not set_by_user(3):
            return
        for name, p in recorder.module.named_parameters():
            if p is tensor:
                recorder.last[name] = flag
                if flag and name in recorder.frozen:
                    recorder.woken.add(name)
                    recorder.frozen = {k: v for k, v in recorder.frozen.items() if k != name}
                elif not flag and name not in recorder.frozen:
                    recorder.frozen = {**recorder.frozen, name: user_source(3, recorder.boundary)}

    def set_flag(tensor, flag):
        base.__set__(tensor, flag)
        note(tensor, bool(flag))

    def requires_grad_(tensor, flag=True):
        out = method(tensor, flag)
        note(tensor, bool(flag))
        return out
    return property(base.__get__, set_flag), requires_grad_


def stamping(recorder: Recorder):
    """Graph.create_node that also stamps each new call with what the recorder knows."""
    create_node = torch.fx.Graph.create_node

    def create(graph, op, target, args=None, kwargs=None, *rest, **more):
        node = create_node(graph, op, target, args, kwargs, *rest, **more)
        if op == "call_function":
            recorder.stamp(node, target, args)
        return node
    return create


def fencing(recorder: Recorder, apply):
    """Function.apply that records each user Function call and fences it with marker ops."""
    def fenced_apply(cls, *args, **kwargs):
        if cls is torch.utils.checkpoint.CheckpointFunction:
            return reentrant_checkpoint(*args)
        if cls.__module__.split(".")[0] == "torch":   # torch's own Functions (custom ops use one)
            return apply.__func__(cls, *args, **kwargs)
        call = len(recorder.calls)
        recorder.calls.append(FunctionCall(cls, user_source(2, recorder.boundary), [
            TensorArg(tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args]))
        args = [function_input(a, call) if isinstance(a, torch.Tensor) else a for a in args]
        recorder.depth += 1
        try:
            out = apply.__func__(cls, *args, **kwargs)
        finally:
            recorder.depth -= 1
        if not isinstance(out, torch.Tensor):   # export inlines its forward: its backward would go unseen
            raise refusal(recorder.calls[call], "it returns more than one tensor" if isinstance(out, (tuple, list))
                          else f"it returns {type(out).__name__}, not a tensor")
        return function_output(out, call)
    return classmethod(fenced_apply)


def reentrant_checkpoint(run_function, preserve_rng_state, *args):
    """torch.utils.checkpoint with use_reentrant=True (its default), as the gradients see it.
    Traced as it is, export records the Function's inner no_grad but not the return to grad
    mode, and would cut everything after the call. Recomputing changes no gradient, but when no
    tensor argument requires grad the output has none, as torch warns: a no_grad at the call."""
    if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        return run_function(*args)
    with torch.no_grad():
        return run_function(*args)


def data_as_detach(recorder: Recorder):
    """Tensor.data that traces the user's own `.data` as a marked `.detach()`: export would trace
    it into a constant, and a write through it (`p.data.clamp_(-c, c)`) would change nothing.
    The translator imports such writes and refuses any other use. Assigning `.data` export does
    not record at all: refused here. torch's internal uses pass through."""
    base = torch._C.TensorBase.data

    def data(tensor):
        if is_user_frame(sys._getframe(1)):
            recorder.data = True
            try:
                return tensor.detach()
            finally:
                recorder.data = False
        return base.__get__(tensor)

    def set_data(tensor, value):
        caller = sys._getframe(1)
        if is_user_frame(caller):
            at = frame_source(caller)
            raise ModelError("assigning '.data' cannot be imported (export does not record it); write the new "
                             "value in place instead: p.data.copy_(new), or p.copy_(new) under torch.no_grad()",
                             display(at.path), at.line, at.col)
        base.__set__(tensor, value)
    return property(data, set_data)


def inference_as_no_grad():
    """inference_mode's __enter__/__exit__ as no_grad's: export traces inference_mode as nothing
    at all, so what it computes would look differentiable; as no_grad it is a cut at its line."""
    def enter(self):
        self.gradflow_cut = torch.no_grad() if self.mode else None
        if self.gradflow_cut is not None:
            self.gradflow_cut.__enter__()

    def exit_(self, *exc):
        if self.gradflow_cut is not None:
            self.gradflow_cut.__exit__(*exc)
    return enter, exit_


def autocast_as_nothing():
    """autocast's __enter__/__exit__ as no-ops. The step runs in float64, where autocast would
    only lower precision (casts such as `.half()` are identities too); export would wrap its
    block in a call gradflow cannot map, even when autocast is disabled (CUDA's, on a CPU)."""
    def enter(self):
        return self

    def exit_(self, *exc):
        return False
    return enter, exit_


@contextmanager
def watching(recorder: Recorder):
    """Patch node creation, Function.apply, Tensor.data, requires_grad, autograd.grad, register_hook,
    inference_mode and autocast for the duration of one export, and turn off the value checks of
    ``torch.distributions`` that the user did not ask for: ``Categorical(logits=...)`` checks by
    default that its arguments are valid, an ``if`` on tensor values that export cannot trace and
    that changes no gradient."""
    checks = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)
    create_node, apply = torch.fx.Graph.create_node, torch.autograd.Function.__dict__["apply"]
    inference, autocast = torch.autograd.grad_mode.inference_mode, torch.amp.autocast_mode.autocast
    enter, exit_ = inference.__dict__["__enter__"], inference.__dict__["__exit__"]
    amp_enter, amp_exit = autocast.__dict__["__enter__"], autocast.__dict__["__exit__"]
    torch.fx.Graph.create_node = stamping(recorder)
    torch.Tensor.requires_grad, torch.Tensor.requires_grad_ = requires_grad_watched(recorder)
    grad, backward = torch.autograd.grad, torch.Tensor.backward
    torch.autograd.grad, torch.Tensor.backward = autograd_refused(grad, backward)
    register_hook = torch.Tensor.register_hook
    torch.Tensor.register_hook = hook_refused(register_hook)
    torch.autograd.Function.apply = fencing(recorder, apply)
    torch.Tensor.data = data_as_detach(recorder)
    inference.__enter__, inference.__exit__ = inference_as_no_grad()
    autocast.__enter__, autocast.__exit__ = autocast_as_nothing()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # export's advice about the user's code is not ours to print
            yield
    finally:
        torch.distributions.Distribution.set_default_validate_args(checks)
        torch.fx.Graph.create_node = create_node
        del torch.Tensor.requires_grad, torch.Tensor.requires_grad_   # back to TensorBase's own
        torch.autograd.grad, torch.Tensor.backward = grad, backward
        torch.Tensor.register_hook = register_hook
        torch.autograd.Function.apply = apply
        del torch.Tensor.data   # back to TensorBase's own descriptor
        inference.__enter__, inference.__exit__ = enter, exit_
        autocast.__enter__, autocast.__exit__ = amp_enter, amp_exit


def export(module: torch.nn.Module, inputs: tuple, fallback: Source):
    """(ExportedProgram, Recorder) of ``module(*inputs)`` in the training IR."""
    hooks_refused(module, fallback)
    recorder = Recorder(boundary=sys._getframe(), module=module,
                        frozen={name: None for name, p in module.named_parameters() if not p.requires_grad})
    with users_failure(export_message, fallback), watching(recorder):   # torch refused the user's code, or it exited
        program = torch.export.export(module, inputs, strict=False)
    return program, recorder
