"""Replaying a repeated module: ``repeat`` evaluates the block's expressions once and copies.

Every instance of ``repeat(block, h, times=N)`` records the same nodes: the same ops with
the same attributes on the same shapes, only fed by the previous instance and holding
its own parameters. So the first instance is built the general way (expression trees
walked, arguments bound, shapes inferred) and taken as a template; each later instance
whose input has the template's shape, dtype and gradient requirement is recorded by
copying the template's nodes with their parents mapped onto the new instance. Blocks
that call modules or seeded ops (dropout: a seed per call) are always built the
general way, as is any instance that would pass the node limit (it raises there).
"""

from __future__ import annotations

from gradflow.engine import Tensor
from gradflow.model.evaluate import NodeInfo

INPUT = object()        # a parent reference: the instance's input


class Template:
    """The nodes one instance of a block recorded, with parents as references."""

    def __init__(self, tape, start: int, path: str, x: Tensor, params: dict, out: Tensor, dims: dict):
        self.tape, self.dims, self.signature = tape, dims, signature(x)
        made = tape.nodes[start:]
        self.size = len(made)                                   # nodes an instance adds, params too
        local = {t.index: name for name, t in params.items()}
        made = [n for n in made if n.index not in local]        # its own parameters: made anew
        position = {n.index: k for k, n in enumerate(made)}
        self.prefix = len(path) + 1                             # "step.0." before an entry's key

        def ref(t):
            if t is x:
                return INPUT
            if t.index in local:
                return local[t.index]
            return position.get(t.index, t)                     # outside: the same tensor

        self.steps = [(n, tuple(ref(p) for p in n.parents)) for n in made]
        self.out = ref(out)

    def fits(self, x: Tensor) -> bool:
        shape, dtype, requires_grad = self.signature
        return x.shape == shape and x.dtype is dtype and x.requires_grad is requires_grad

    def replay(self, path: str, x: Tensor, params: dict) -> Tensor:
        """Record one more instance at ``path`` (its params already made); return its output."""
        tape, made, entries, cut = self.tape, [], {}, self.prefix
        for node, refs in self.steps:
            meta = node.meta
            if meta is not None:
                key = meta.entry[cut:]
                entry = entries.get(key) or entries.setdefault(key, f"{path}.{key}")  # one string per entry
                meta = NodeInfo(entry, meta.op, meta.line, meta.col, meta.call, meta.file)
            parents = tuple([x if r is INPUT else made[r] if r.__class__ is int else
                             params[r] if r.__class__ is str else r for r in refs])
            made.append(Tensor(tape, node.op, parents, node.attrs, node.shape, node.dtype,
                               node.value if node.op is None else None, node.requires_grad, meta))
        r = self.out
        return x if r is INPUT else made[r] if r.__class__ is int else params[r] if r.__class__ is str else r


def signature(x: Tensor) -> tuple:
    return x.shape, x.dtype, x.requires_grad
