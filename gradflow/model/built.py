"""Model: a built model, its lazy tape and the named tensors on it.

``build.py`` makes one with shapes only; ``materialize`` gives its leaves their values
and runs the forward pass, and ``memory_estimate`` says beforehand what that will hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gradflow.engine import Tape
from gradflow.errors import ModelError
from gradflow.model.evaluate import NodeInfo
from gradflow.model.init import initial_value
from gradflow.model.spec import ModelSpec


@dataclass(repr=False)
class Model:
    """A built model: the spec, its lazy tape and the named tensors on it."""
    spec: ModelSpec
    dims: dict
    seed: int
    tape: Tape
    inputs: dict = field(default_factory=dict)       # name -> Tensor
    params: dict = field(default_factory=dict)       # name -> Tensor, file order then instances
    places: dict = field(default_factory=dict)       # param or input name -> Place in the model file
    sources: dict = field(default_factory=dict)      # the same -> Place reports point at (source:)
    frozen: set = field(default_factory=set)         # params marked frozen: true
    entries: dict = field(default_factory=dict)      # top-level graph name -> Tensor
    losses: dict = field(default_factory=dict)       # loss name -> scalar Tensor
    inits: dict = field(default_factory=dict)        # leaf name -> (kind, args) or ("value", array)
    weights: dict = field(default_factory=dict)      # leaf name -> array loaded from --weights
    weights_from: str | None = None                  # the --weights archive, when one was given
    warnings: list = field(default_factory=list)     # InputWarnings: of --weights, say
    materialized: bool = False
    left_out: dict = field(default_factory=dict)     # loss name -> Tensor, the losses keep_losses dropped

    def __repr__(self) -> str:
        """One line, as a notebook shows it: not every tensor of the tape."""
        losses = ", ".join(self.losses)
        return (f"<Model {self.name!r} from {self.path}: {len(self.params)} parameters "
                f"({self.param_count:,} values), {len(self.tape.nodes)} nodes, losses {losses}>")

    @property
    def path(self) -> str:
        return self.spec.path

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def param_count(self) -> int:
        return sum(t.size for t in self.params.values())

    def memory_estimate(self) -> int:
        """Bytes a numeric run holds at its peak: every value, plus a gradient for each node
        that can receive one (twice over while a counterfactual sweep runs), plus the largest
        temporary one op makes on the way (a convolution's window copy)."""
        total, scratch = 0, 0
        for node in self.tape.nodes:
            nbytes = node.size * node.dtype.itemsize
            total += nbytes * (3 if node.requires_grad else 1)
            if node.op is not None and node.op.scratch is not None:
                elements = node.op.scratch(node.shape, *[p.shape for p in node.parents], **node.attrs)
                scratch = max(scratch, elements * node.dtype.itemsize)
        return total + scratch

    def error(self, message: str, place) -> ModelError:
        """An error about the model at ``place``, in the model file or the code it came from."""
        return ModelError(message, place.file or self.path, place.line, place.col)

    def keep_losses(self, names) -> None:
        """Analyse only these losses (and check only their expectations)."""
        for name in names:
            if name not in self.losses:   # at the losses the file declares, not at its line 1
                first = next(iter(self.spec.losses.values()))
                raise self.error(f"--loss {name}: the model has no loss {name!r} (it has {', '.join(self.losses)})",
                                 first.source or first.place)
        self.left_out.update({name: t for name, t in self.losses.items() if name not in names})
        self.losses = {name: self.losses[name] for name in names}
        self.spec.losses = {name: self.spec.losses[name] for name in names}
        self.spec.expect = {k: v for k, v in self.spec.expect.items() if k in names}

    def materialize(self) -> None:
        """Give every leaf its initial (or loaded) value and run the forward pass (where a value
        inside an expression is read by no gradient rule, the next op may write over it: see Tape.run)."""
        for name, tensor in {**self.inputs, **self.params}.items():
            if tensor.value is not None:
                continue
            if name in self.weights:
                tensor.value = np.asarray(self.weights[name], dtype=tensor.dtype)
                continue
            kind, args = self.inits[name]
            if kind == "value":
                tensor.value = np.asarray(args, dtype=tensor.dtype).reshape(tensor.shape)
            else:
                tensor.value = initial_value(kind, args, tensor.shape, tensor.dtype, self.seed, name)
        try:
            self.tape.run()
        except (ArithmeticError, TypeError, ValueError, IndexError) as e:
            raise self.forward_error(e) from None
        self.materialized = True

    def forward_error(self, error: Exception) -> ModelError:
        """The forward pass failed on something the shape rules let through: say where."""
        meta = getattr(self.tape.failed, "meta", None)
        if not isinstance(meta, NodeInfo):
            return ModelError(f"the forward pass failed: {error}", self.path, 1, 1)
        if meta.file not in (None, self.path):   # an imported model's node: at the user's line, whose call
            return ModelError(str(error), meta.file, meta.line, meta.col)   # may be another op of gradflow's
        return ModelError(f"graph.{meta.entry} ({self.path}:{meta.line}): {meta.op} failed: {error}",
                          self.path, meta.line, meta.col)
