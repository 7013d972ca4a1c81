"""The leaves of an imported model: parameters, inputs and constants, with their arrays.

Parameters keep their ``named_parameters()`` names (a tied parameter is one
parameter under its first name) and ``requires_grad=False`` makes them frozen; a
tensor attribute that requires grad (not an ``nn.Parameter``) is a parameter too;
inputs are named after ``forward``'s arguments; buffers and tensors computed from
constants alone (``arange``, a causal mask) become constant inputs carrying
their values, written only when the graph uses them.
"""

from __future__ import annotations

import torch
from torch.export.graph_signature import InputKind

from gradflow.engine import ALIASES, OPS as GRADFLOW_OPS
from gradflow.importers.document import Tensor


class Const:
    """A tensor whose value does not depend on parameters or inputs."""

    def __init__(self, value: torch.Tensor, wanted: str):
        self.value, self.wanted = value, wanted
        self.name = None              # its input's name once something uses it


class Leaves:
    """Binds the exported program's placeholders (mixed into the Translator)."""

    def bind_leaves(self) -> None:
        module, step = self.step.module, self.step
        canonical = {}
        for name, p in module.named_parameters():
            canonical.setdefault(id(p), name)
        placeholders = [n for n in self.program.graph.nodes if n.op == "placeholder"]
        user = iter(step.inputs)
        for node, spec in zip(placeholders, self.program.graph_signature.input_specs):
            if spec.kind == InputKind.PARAMETER:
                self.bind_param(node, canonical[id(module.get_parameter(spec.target))])
            elif spec.kind == InputKind.USER_INPUT:
                self.bind_input(node, next(user))
            elif spec.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ):
                value = module.get_buffer(spec.target) if spec.kind == InputKind.BUFFER \
                    else self.program.constants[spec.target]   # a tensor, or an object (a draw's generator)
                if spec.kind == InputKind.CONSTANT_TENSOR and value.grad_fn is not None:
                    raise self.step_error(
                        f"the module's tensor {spec.target!r} was computed from parameters before forward (its "
                        f"grad_fn is {type(value.grad_fn).__name__}): torch's backward reaches them through the "
                        "graph built then, and on the first step only; compute it in forward, or make it an "
                        "nn.Parameter or a buffer")
                if isinstance(value, torch.Tensor) and value.requires_grad:
                    # a tensor the user trains without nn.Parameter (SAC's log_alpha with its own
                    # optimizer): a parameter named after its attribute, as torch gives it a gradient
                    self.bind_param(node, spec.target, value)
                else:
                    self.values[node] = Const(value.detach(), spec.target) if isinstance(value, torch.Tensor) else value
            else:
                raise self.fail(node, f"unsupported export input kind {spec.kind.name}")

    def check_param_names(self, losses) -> None:
        """Refuse a top-level parameter (self.norm = nn.Parameter(...)) named like one of gradflow's
        ops, and a loss keyed like a parameter: one namespace holds ops, parameters and losses."""
        names = {t.name for t in self.out.params}
        like_ops = sorted(names & (set(GRADFLOW_OPS) | set(ALIASES)))
        if like_ops:
            raise self.step_error(f"parameter {like_ops[0]!r} has the name of one of gradflow's ops (`gradflow ops` "
                                  f"lists them), which a model cannot give a parameter: rename self.{like_ops[0]}")
        taken = [key for key in losses if key in names]
        if taken:
            raise self.step_error(f"loss name {taken[0]!r} is also the name of a parameter: give the loss another "
                                  f"key, such as '{taken[0]}_loss'")

    def bind_param(self, node, name: str, p: torch.Tensor | None = None) -> None:
        if name not in self.values.values():
            p = self.step.module.get_parameter(name) if p is None else p
            self.used.add(name)
            trainable = self.recorder.last.get(name, p.requires_grad)   # as backward finds it, after forward
            self.out.params.append(Tensor(name, tuple(p.shape), frozen=not trainable))
            self.out.arrays[name] = p.detach().double().numpy()
        self.values[node] = name

    def bind_input(self, node, value: torch.Tensor) -> None:
        name = self.unique(node.name)
        array = as_array(value)
        self.out.inputs.append(Tensor(name, tuple(value.shape), "float" if array.dtype.kind == "f" else "int"))
        self.out.arrays[name] = array
        self.values[node] = name

    def constant_input(self, const: Const) -> str:
        """A constant used by the graph becomes an input carrying its value (once)."""
        if const.name is None:
            const.name = self.unique(const.wanted)
            value = as_array(const.value)
            kind = "float" if value.dtype.kind == "f" else "int"
            self.out.inputs.append(Tensor(const.name, tuple(value.shape), kind, value=value))
            self.out.arrays[const.name] = value
        return const.name


def as_array(value: torch.Tensor):
    """float tensors as float64, bool as 0/1 floats (gradflow's comparisons), ints as int64."""
    value = value.detach()
    if value.dtype == torch.bool or value.dtype.is_floating_point:
        return value.double().numpy()
    return value.long().numpy()
