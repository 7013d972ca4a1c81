"""An exported program -> an ``Imported`` document: names, leaves, graph lines, losses.

Each aten node becomes one graph line at the user's source place (``aten.py``
says which expression); a no_grad block's outputs are cut by ``no_grad`` at its
``with`` line; a custom Function call becomes what probing its backward found
(``blocks.py``).
Nodes no loss depends on are left out. What a node is (its aten name, shape,
kind, views and in-place writes) ``fxgraph.py`` and ``fxwrites.py`` read off
the exported graph; ``rebind.py`` gives a tensor written in place its new value.
"""

from __future__ import annotations

import collections
import operator
import re

import torch

from gradflow.engine import ALIASES, OPS as GRADFLOW_OPS
from gradflow.errors import ModelError, did_you_mean
from gradflow.importers.document import Imported, Line
from gradflow.importers.torch.aten import OPS
from gradflow.importers.torch.blocks import DRAWS, Blocks
from gradflow.importers.torch.call import Alias, Call, Parts, Unsupported
from gradflow.importers.torch.capture import FROZEN, SOURCE, function_input, function_output
from gradflow.importers.torch.fxgraph import (
    NO_GRAD_HOP, ancestors, aten_text, data_dependent, in_place, kind_of, shape_of, target_name,
)
from gradflow.importers.torch.fxmasks import lift_masked_writes
from gradflow.importers.torch.fxwrites import cut_only
from gradflow.importers.torch.leaves import Const, Leaves
from gradflow.importers.torch.places import display
from gradflow.importers.torch.rebind import Rebinding

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*")
# torch.empty_like(std).normal_(), a dropout mask's .bernoulli_(q): drawn once, at import
RANDOM_FILLS = {"normal_", "uniform_", "bernoulli_", "exponential_", "geometric_", "cauchy_", "log_normal_",
                "random_"}
CONSTANT_LIKE = {"zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like",
                 "randint_like"}


# -- refusals that say what to write instead -----------------------------------------------
ITEM = {"item", "_local_scalar_dense"}   # .item(), .tolist(): a tensor turned into a Python number
ITEM_REFUSED = ("`.item()` cannot be imported: it turns a tensor into a Python number, which the exported graph "
                "cannot follow; keep it a tensor instead (e.g. `pos.sum().clamp(min=1.0)` rather than "
                "`max(pos.sum().item(), 1.0)`), and `.detach()` it if no gradient should pass")


def functorch_refused(name: str) -> str:
    """torch.vmap and torch.func's transforms, which export keeps as calls of their own."""
    return (f"torch.vmap and torch.func transforms cannot be imported (export keeps them as calls such as {name!r}, "
            "which gradflow cannot follow): write the batch out instead, as a module that takes the whole batch "
            "or a loop over its examples joined with torch.stack")


class Translator(Blocks, Leaves, Rebinding):
    """Walks the exported graph in order, filling an ``Imported``."""

    def __init__(self, program, step, recorder, imported: Imported):
        self.program, self.step, self.recorder, self.out = program, step, recorder, imported
        self.values = {}                    # fx node -> name | Const | Parts | tuple | Python value
        self.used = set(GRADFLOW_OPS) | set(ALIASES) | {"repeat", "True", "False", "None"}
        self.call_inputs = {}               # Function call index -> name of its input
        self.block_wants = {}               # grad-mode block -> its placeholders whose new value is read after it
        self.grad_mode = {}                 # fx graph -> is gradient on in it
        self.block_updates = {}             # (no_grad block, placeholder) -> name of the input's new value
        self.frozen_uses = {}               # (parameter, Source) -> name of its use with requires_grad off

    # -- names and lines ---------------------------------------------------------------
    def unique(self, wanted: str) -> str:
        base = re.sub(r"_+", "_", re.sub(r"\W", "_", wanted)).strip("_") or "node"   # no "__": not a name
        base = base if not base[0].isdigit() else "n" + base
        # fx numbers repeats name_1, name_2...; a name gradflow reserves (an op's) becomes name_0
        name, i = base, 0
        while name in self.used or name.startswith("__"):
            name = f"{base}_0" if i == 0 else f"{base}_0_{i}"
            i += 1
        self.used.add(name)
        return name

    def source_of(self, node):
        return node.meta.get(SOURCE) or self.step.source

    def emit(self, node, expr: str, wanted: str | None = None, source=None) -> str:
        name = self.unique(wanted or node.name)
        self.out.graph.append(Line((name,), expr, source or self.source_of(node)))
        return name

    def fail(self, node, message: str) -> ModelError:
        at = self.source_of(node)
        return ModelError(message, display(at.path), at.line, at.col)

    def run(self) -> None:
        spec = self.program.call_spec.out_spec
        if spec is None or spec.type not in (dict, collections.OrderedDict):
            raise self.step_error("module(*inputs) must return a dict of scalar losses")
        if not spec.context:
            raise self.step_error("module(*inputs) returned no losses: its dict must hold at least one scalar loss")
        for key, child in zip(spec.context, spec.children()):
            if not isinstance(key, str) or not NAME.fullmatch(key) or "." in key:
                such = re.sub(r"\W+", "_", str(key)).strip("_")
                such = f", such as {such!r}" if such and NAME.fullmatch(such) and not such[0].isdigit() else ""
                raise self.step_error(f"loss name {key!r} is not an identifier (letters, digits and _): "
                                      f"give the loss another key{such}")
            if key in self.used:
                raise self.step_error(f"loss name {key!r} is the name of one of gradflow's ops: give the loss "
                                      f"another key, such as '{key}_loss'")
            if not child.is_leaf():   # a tuple or dict of tensors: its tensors would take the next names
                what = "None" if child.type is type(None) else f"a {child.type.__name__}"
                raise self.step_error(f"loss {key!r} is {what}, but each loss must be one scalar tensor: "
                                      f"return each as its own key of the dict")
            self.used.add(key)
        for what, given in (("wrt", self.step.wrt), ("expect", self.step.expect)):
            unknown = [k for k in given if k not in spec.context]
            if unknown:
                close = did_you_mean(str(unknown[0]), [str(k) for k in spec.context])
                raise self.step_error(f"{what} names {unknown[0]!r}, which module(*inputs) does not return "
                                      f"{close[1:] if close else ''}"
                                      f"{'' if close else '(it returns ' + ', '.join(map(str, spec.context)) + ')'}")
        self.bind_leaves()
        self.check_param_names(spec.context)
        outputs = self.graph(self.program.graph, {})
        for key, node in zip(spec.context, outputs):
            self.loss(key, node)
        prune(self.out)

    def step_error(self, message: str) -> ModelError:
        at = self.step.source
        return ModelError(message, display(at.path), at.line, at.col)

    def graph(self, graph, bound: dict, grad: bool = True, wanted=()) -> list:
        """Translate one fx graph (the program's, or a grad-mode block's); its output values.
        Nodes no output depends on (buffer updates, export's own assertions) are skipped, and so
        are in-place writes whose new value nothing reads (nor the caller, for ``wanted``)."""
        lift_masked_writes(graph)
        needed = ancestors(graph)
        after = self.plan_writes(graph, needed, bound, grad, wanted)
        order = {node: i for i, node in enumerate(graph.nodes)}
        for node in graph.nodes:
            if node.op == "placeholder":
                if node in bound:
                    self.values[node] = bound[node]
            elif node.op == "call_function" and node in needed:
                self.values[node] = self.call(node)
                for span in after.get(node, ()):
                    self.rebind(span, grad, needed, order)
            elif node.op == "output":
                return list(node.args[0])
        return []

    def call(self, node):
        target = node.target
        if data_dependent(node):
            what = aten_text(target) if hasattr(target, "_overloadname") else node.name
            raise self.fail(node, f"unsupported data-dependent shape: the size of what {what} gives depends on tensor "
                                  "values (boolean-mask indexing, nonzero); keep the shape and mask instead, "
                                  "e.g. with torch.where or by multiplying by the mask")
        if target is operator.getitem:
            return self.getitem(node)
        if target is NO_GRAD_HOP:
            return self.no_grad_block(node)
        if target is function_input._opoverload:
            index = node.args[1]
            self.call_inputs[index] = self.tensor(node.args[0], node)
            return self.call_inputs[index]
        if target is function_output._opoverload:
            return self.function(node)
        if target_name(target) == "detach" and cut_only(node, self.grad_mode[node.graph]):
            # read only by writes (p.data.clamp_(), p.data.mul_(m).add_(q.data)) whose new value is
            # cut where the written tensor is given it: no cut of its own
            return self.values.get(node.args[0])
        if not isinstance(target, torch._ops.OpOverload):
            name = getattr(target, "__name__", target)
            if (getattr(target, "__module__", None) or "").startswith("torch._functorch"):
                raise self.fail(node, functorch_refused(name))
            raise self.fail(node, f"unsupported call {name!r} in the exported graph")
        folded = self.fold(node)
        if folded is not None:
            return folded
        return self.aten(node)

    def aten(self, node):
        packet = target_name(node.target)
        handler = OPS.get(packet) or (OPS.get(packet[:-1]) if in_place(packet) else None)
        what = aten_text(node.target)
        if packet in ITEM:
            raise self.fail(node, ITEM_REFUSED)
        if handler is None:
            raise self.fail(node, f"unsupported op {what}: gradflow has no equivalent "
                                  f"(`gradflow ops` lists what it has)")
        try:
            result = handler(self.call_of(node))
        except Unsupported as e:
            raise self.fail(node, f"unsupported op {what} {e}") from None
        except (TypeError, ValueError, IndexError, KeyError, AttributeError) as e:
            # arguments of a form the handler does not know: refuse rather than guess
            raise self.fail(node, f"unsupported op {what} with these arguments ({e})") from None
        if isinstance(result, Alias):
            return result.name
        if isinstance(result, Parts):
            return result
        return self.emit(node, result, "sample" if packet in DRAWS else None)

    def call_of(self, node) -> Call:
        args = [self.argument(a, node) for a in node.args]
        kwargs = {k: self.argument(v, node) for k, v in node.kwargs.items()}
        shapes = [shape_of(a) for a in node.args]
        kinds = {**dict(enumerate(map(kind_of, node.args))), **{k: kind_of(v) for k, v in node.kwargs.items()}}
        return Call(args, kwargs, shape_of(node) or (), shapes, node.target._overloadname, kinds, kind_of(node),
                    lambda expr, suffix: self.emit(node, expr, f"{node.name}_{suffix}"))

    def argument(self, value, user):
        if isinstance(value, torch.fx.Node):
            if isinstance(self.values.get(value), torch.Generator):
                return None   # a draw's generator=: gradflow draws its own numbers, as without one
            name = self.tensor(value, user)
            frozen = user.meta.get(FROZEN)
            if frozen and name in frozen and (frozen[name] is not None or name in self.recorder.woken):
                # frozen from the start: cut where it is read, until forward sets it trainable
                return self.frozen_use(name, frozen[name] or self.source_of(user), user)
            return name
        if isinstance(value, (list, tuple)):
            return [self.argument(v, user) for v in value]
        if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
            return str(value)
        return value

    def frozen_use(self, param: str, source, user) -> str:
        """A parameter read while forward had set its requires_grad to False: cut there, as torch
        gives it no gradient through this use, at the line that set it (one cut per such line)."""
        key = (param, source)
        if key not in self.frozen_uses:
            self.frozen_uses[key] = self.emit(user, f"no_grad({param})", f"{param}_frozen", source)
        return self.frozen_uses[key]

    def tensor(self, node, user) -> str:
        value = self.values.get(node)
        if isinstance(value, Const):
            return self.constant_input(value)
        if not isinstance(value, str):
            raise self.fail(user, f"unsupported use of {node.name!r} (a {type(value).__name__}) in the graph")
        return value

    # -- constants --------------------------------------------------------------------------
    def fold(self, node):
        """Evaluate a node whose tensor inputs are all constants (arange, masks, buffers' slices)."""
        packet = target_name(node.target)
        inputs = [a for a in node.all_input_nodes]
        if packet in CONSTANT_LIKE:
            val = node.meta.get("val")
            return Const(node.target(torch.zeros(val.shape, dtype=val.dtype), *node.args[1:], **node.kwargs), node.name)
        if packet == "detach_" and target_name(node.args[0].target) == "lift_fresh_copy":
            # torch.tensor(2.0) in forward is export's lift_fresh_copy then detach_: no cut the user wrote
            return self.values.get(node.args[0])
        if packet == "detach" or (in_place(packet) and packet not in RANDOM_FILLS) or \
                not all(isinstance(self.values.get(a), Const) for a in inputs):
            return None
        # a random fill draws into a copy: the constant it writes keeps its value under its other names
        args = torch.fx.node.map_arg(node.args, lambda a: self.values[a].value)
        if packet in RANDOM_FILLS:
            args = (args[0].clone(), *args[1:])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda a: self.values[a].value)
        try:
            result = node.target(*args, **kwargs)
        except RuntimeError:   # not computable eagerly here: translate it as an op instead
            return None
        if isinstance(result, torch.Tensor):
            return Const(result, node.name)
        return None

    def loss(self, key: str, node) -> None:
        if not isinstance(node, torch.fx.Node):   # None, or a number forward returned as it is
            what = "None" if node is None else f"a {type(node).__name__}"
            raise self.step_error(f"loss {key!r} is {what}, but each loss must be one scalar tensor")
        name = self.tensor(node, node)
        line = next((line for line in self.out.graph if line.targets == (name,)), None)
        once = sum(1 for n in self.program.graph.output_node().args[0] if n is node) == 1
        if line is not None and once and all(user.op == "output" for user in node.users):
            line.targets = (key,)   # the loss takes the name of the line that computes it
        else:
            self.out.graph.append(Line((key,), name, self.source_of(node)))
        self.out.losses[key] = self.step.wrt.get(key)
        self.out.loss_sources[key] = self.source_of(node)


def prune(out: Imported) -> None:
    """Leave out lines and constants that no loss depends on."""
    needed = set(out.losses)
    for line in reversed(out.graph):
        if needed.intersection(line.targets):
            needed.update(NAME.findall(line.expr))
    out.graph = [line for line in out.graph if needed.intersection(line.targets)]
    dropped = {t.name for t in out.inputs if t.value is not None and t.name not in needed}
    out.inputs = [t for t in out.inputs if t.name not in dropped]
    for name in dropped:
        out.arrays.pop(name, None)
