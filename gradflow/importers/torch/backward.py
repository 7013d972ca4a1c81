"""A step that writes in place is run once more in torch, forward and backward, on a copy.

torch refuses a backward that needs a value its forward saved and then wrote over in
place (weight clipping after the loss was computed from those weights): "one of the
variables needed for gradient computation has been modified by an inplace operation".
The exported graph reads the value from before the write, so gradflow would report
gradients for a step torch cannot train. The copy's forward notes every tensor autograd
saves, with its version and the user's line that saved it; its backward, as torch's,
fails where it takes back a saved tensor written since, and the error is at that line.
"""

from __future__ import annotations

import copy
import io
from contextlib import redirect_stderr, redirect_stdout

import torch

from gradflow.errors import ModelError
from gradflow.importers.document import Source
from gradflow.importers.torch.places import display, stops, user_source


class Rewritten(Exception):
    """A saved tensor taken back by the backward pass was written in place since it was saved."""

    def __init__(self, tensor, at: Source | None):
        super().__init__()
        self.tensor, self.at = tensor, at


def check_backward(module: torch.nn.Module, inputs: tuple, fallback: Source) -> None:
    """Raise a located ModelError if torch's backward of the step would fail on a saved value
    that forward wrote in place; anything else the rerun meets is left to the exported graph."""
    try:   # the step's own writes must change neither the real weights nor the inputs
        module, inputs = copy.deepcopy((module, inputs))
    except Exception:
        return
    saved = []   # (tensor, its version when saved, the user's line that saved it)

    def pack(tensor):
        saved.append((tensor, tensor._version, user_source(2)))
        return len(saved) - 1

    def unpack(i):   # what torch checks of a saved tensor, here where the line that saved it is known
        tensor, version, at = saved[i]
        if tensor._version != version:
            raise Rewritten(tensor, at)
        return tensor
    try:
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()), \
                torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            losses = [v for v in module(*inputs).values() if isinstance(v, torch.Tensor) and v.requires_grad]
        params = [p for p in module.parameters() if p.requires_grad]
        if losses and params:
            torch.autograd.grad(losses, params, allow_unused=True)
    except Rewritten as e:
        names = {id(p): name for name, p in module.named_parameters()}
        name = names.get(id(e.tensor)) or names.get(id(e.tensor._base))
        at = e.at or fallback
        raise ModelError(f"{name or 'a value'}, saved here for the backward pass, is written in place later in "
                         "forward, so torch's backward fails ('one of the variables needed for gradient computation "
                         "has been modified by an inplace operation'); write it after the backward, or write into "
                         "a .clone()", display(at.path), at.line, at.col) from None
    except BaseException as e:   # the exported graph ran: what else a rerun meets is not the step's
        if stops(e):
            raise
