"""In-place writes as torch runs them: after a write into all of a tensor, every later read sees
its new value, however it is named.

export rewires only the written name's later uses to the write: a parameter clamped in a
no_grad block, or written through ``.detach()`` or ``.data``, is read afterwards as it was
before, and so is a view taken before the write. The translator gives the written tensor
its new value (mixed into the Translator): as torch's leaf keeps its identity, it keeps its
own gradient and only its value changes, cut at the ``with`` line (``p + no_grad(new - p)``)
or at ``.detach()`` / ``.data`` (``p + stop_gradient(new - p)``); views taken before the write
are taken again. A write into part of a tensor read again is refused where it is written.
"""

from __future__ import annotations

import math
import re

from gradflow.errors import ModelError
from gradflow.importers.torch.call import shape_text
from gradflow.importers.torch.capture import BLOCK, DATA, GRAD_OFF
from gradflow.importers.torch.fxgraph import aten_text, block_graph, shape_of, writes
from gradflow.importers.torch.fxwrites import (
    block_alias, cut_only, live_writes, made_from, stale_views, stale_write, writes_in,
)
from gradflow.importers.torch.leaves import Const

DATA_READ = "'.data' cannot be imported (export turns it into a constant); use '.detach()' to cut the gradient"


class Rebinding:
    """Gives written tensors their new values (mixed into the Translator)."""

    def plan_writes(self, graph, needed: set, bound: dict, grad: bool, wanted) -> dict:
        """The Spans of the whole writes whose new value is read, by the node after which the
        root has it; ``needed`` grows by what computes them. Stale reads and ``.data`` reads are
        refused."""
        found = writes_in(graph)
        live = live_writes(graph, needed, found, wanted)
        self.refuse_writes(graph, needed, found, bound, grad)
        self.grad_mode[graph] = grad
        after = {}
        for span in live:
            after.setdefault(span.write.node, []).append(span)
            if span.write.place is not None:
                self.block_wants.setdefault(span.write.node, set()).add(span.write.place)
        return after

    def refuse_writes(self, graph, needed: set, found: list, bound: dict, grad: bool) -> None:
        """Reads that a write leaves stale are located errors, and so is a ``.data`` read where
        gradient is on, but by in-place writes whose new value is cut (``p.data.mul_(m).add_(q.data)``)."""
        write = stale_write(graph, needed, found)
        if write is not None:
            raise self.partial_write(write, bound)
        for node in graph.nodes:
            if node.meta.get(DATA) and node in needed and grad and not cut_only(node, grad):
                raise self.fail(node, DATA_READ)

    def partial_write(self, write, bound: dict) -> ModelError:
        what = aten_text(write.at.target)
        value = bound.get(write.root, self.values.get(write.root))
        if isinstance(value, str) and any(p.name == value for p in self.out.params):
            if math.prod(shape_of(write.at.args[0]) or ()) == math.prod(shape_of(write.root) or ()):
                return self.fail(write.at, f"unsupported in-place write ({what}) into parameter {value!r} through "
                                           "a view of it (a transpose, a permute), which is read again afterwards "
                                           "and export leaves reading its old value; write into the parameter "
                                           "itself instead")
            return self.fail(write.at, f"unsupported in-place write ({what}) into part of parameter {value!r}, "
                                       "which is read again afterwards and export leaves reading its old value; "
                                       "write all of it instead, as in p.copy_(torch.where(mask, new, p))")
        return self.fail(write.at, f"unsupported in-place write ({what}) into a tensor that is read again through "
                                   "another name (its base, a view of it, a parameter), which export leaves reading "
                                   "the old value; build the new value with torch.stack, torch.cat or torch.where "
                                   "instead")

    def rebind(self, span, grad: bool, needed: set, order: dict) -> None:
        """After a write (translated), its root has its new value, and so do names of it made before."""
        write = span.write
        old = self.values.get(write.root)
        new = self.values.get(write.place if write.place is not None else write.node)
        if write.place is None and shape_of(write.node) != shape_of(write.root):   # through a view(-1)
            new = self.reshaped(new, write)
        if write.place is not None and not write.node.args[0]:
            value = self.block_updates.get((write.node, write.place)) or \
                self.cut("no_grad", old, new, write, self.block_source(write.node))
        elif grad and write.detach is not None:
            value = self.cut("stop_gradient", old, new, write, self.source_of(write.detach))
        elif grad and write.at.meta.get(GRAD_OFF):
            # gradient was off, in a block export did not keep (nn.init.constant_'s): a no_grad
            # update, which export's own later reads of the written name see too
            value = self.values[write.node] = self.cut("no_grad", old, new, write, self.source_of(write.at))
        else:   # written as itself, or in a no_grad block, whose outputs are cut at its end
            value = new
        self.values[write.root] = value
        for name in stale_views(span, needed, order):
            # a write's output (a block's too) is the memory it wrote into: what that is now
            new_name = writes(name) or block_alias(name) is not None
            self.values[name] = self.values.get(made_from(name)) if new_name else self.call(name)

    def cut(self, op: str, old, new, write, source):
        """``old + op(new - old)``: new's value, old's gradient (a leaf keeps its identity)."""
        if new is old:
            return new
        if isinstance(old, Const):   # a constant (a buffer) has no gradient to keep
            if isinstance(new, Const):
                return new
            return self.emit(write.at, f"{op}({self.tensor_name(new)})", updated(old.name or old.wanted), source)
        new = self.tensor_name(new)
        return self.emit(write.at, f"{old} + {op}({new} - {old})", updated(old), source)

    def reshaped(self, new, write):
        """What a write through a view of all of its root in another shape gave, in the root's shape."""
        shape = shape_of(write.root)
        if isinstance(new, Const):
            return Const(new.value.reshape(shape), new.wanted)
        return self.emit(write.at, f"reshape({new}, {shape_text(shape)})", f"{write.root.name}_written")

    def tensor_name(self, value) -> str:
        return self.constant_input(value) if isinstance(value, Const) else value

    def block_source(self, node):
        """Where a grad-mode block starts: the ``with`` line that turned gradient off."""
        index = self.block_index(node)
        return self.source_of(node) if index is None else self.recorder.blocks[index]

    def block_index(self, node) -> int | None:
        """The recorder's number of a grad-mode block, or None when it is not known."""
        # a placeholder carries the meta of what it stands for, made in an earlier block maybe
        blocks = [n.meta[BLOCK] for n in block_graph(node).nodes if BLOCK in n.meta and n.op == "call_function"]
        return blocks[0] if blocks else None


def updated(name: str) -> str:
    """The name of a tensor's value after an in-place write: the tensor's own (``h_updated`` for
    ``h.mul_(2)``, not the op's), once however often it is written (``unique`` numbers repeats)."""
    return re.sub(r"(_updated(_0(_\d+)?)?)+$", "", name) + "_updated"
