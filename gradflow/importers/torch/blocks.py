"""Nodes that give more than one value, grad-mode blocks and custom Functions, as the translator
reads them (mixed into the Translator).

A no_grad block's outputs are cut by ``no_grad`` at its ``with`` line, but for an in-place
update under it (weight clipping, an EMA), which keeps the tensor's own gradient and changes
only its value. A custom Function call becomes what probing its backward found: a reversal,
a scaling, or a straight-through estimator.
"""

from __future__ import annotations

from gradflow.importers.torch.call import Alias, Parts
from gradflow.importers.torch.functions import classify
from gradflow.importers.torch.fxgraph import block_graph, target_name
from gradflow.importers.torch.fxwrites import written_input
from gradflow.importers.torch.leaves import Const
from gradflow.importers.torch.rebind import updated

DRAWS = {"bernoulli", "normal", "multinomial"}   # aten ops imported as gradflow's draws: cuts of their own


class Blocks:
    def getitem(self, node):
        source, index = node.args
        value = self.values.get(source)
        if isinstance(value, Parts):
            part = value.exprs[index]
            return part.name if isinstance(part, Alias) else self.emit(node, part)
        if isinstance(value, tuple):
            return value[index]
        if isinstance(value, Const) or value is None:
            return None
        raise self.fail(node, f"unsupported indexing of {source.name!r}")

    def no_grad_block(self, node):
        enabled, _, *args = node.args
        graph = block_graph(node)
        places = [n for n in graph.nodes if n.op == "placeholder"]
        inner = self.graph(graph, {p: self.values.get(a, a) for p, a in zip(places, args)}, bool(enabled),
                           self.block_wants.get(node, set()))
        if enabled:
            return tuple(self.values.get(n, n) for n in inner)
        source = self.block_source(node)
        # a library's block, not the user's `with` (a distribution's sample()): a draw in it is the cut
        library = self.block_index(node) in self.recorder.libraries
        outputs = []
        for n in inner:
            value = self.values.get(n, n)
            written = written_input(n, places)
            if written is not None and isinstance(value, str):
                # an in-place update under no_grad (weight clipping, an EMA): the tensor keeps its own
                # gradient and only its value changes, as torch's leaf keeps its identity
                outer = self.values.get(args[places.index(written)])
                if isinstance(outer, str):
                    outputs.append(self.emit(node, f"{outer} + no_grad({value} - {outer})",
                                             updated(outer), source))
                    if value == self.values.get(written):   # its last write: what later reads want too
                        self.block_updates[node, written] = outputs[-1]
                    continue
            carries = isinstance(value, str) and getattr(n.meta.get("val"), "is_floating_point", lambda: 0)() \
                and not (library and n.op == "call_function" and target_name(n.target) in DRAWS)
            # integer results (an argmax) carry no gradient anyway, nor a draw: no cut to report
            outputs.append(self.emit(node, f"no_grad({value})", f"{n.name}_no_grad", source) if carries else value)
        return tuple(outputs)

    def function(self, node):
        index = node.args[1]
        call = self.recorder.calls[index]
        kind = classify(call)
        x, y = self.call_inputs[index], self.tensor(node.args[0], node)
        expr = {"reverse": f"grad_reverse({x})", "scale": f"grad_scale({x}, {kind.factor!r})",
                "straight": f"{x} + stop_gradient({y} - {x})"}[kind.name]
        return self.emit(node, expr, call.cls.__name__.lower(), call.source or self.source_of(node))
