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


class Template:
    """The nodes one instance of a block recorded, with parents as slot numbers.

    An instance's slots are its input, its parameters, the outside tensors the block
    reads (the same for every instance), then the nodes it records, in that order: so
    every parent reference is a number fixed once here, and replaying is indexing.
    """

    def __init__(self, tape, start: int, path: str, x: Tensor, params: dict, out: Tensor, dims: dict):
        self.tape, self.dims, self.signature = tape, dims, signature(x)
        made = tape.nodes[start:]
        self.size = len(made)                                   # nodes an instance adds, params too
        self.names = tuple(params)
        slot = {x.index: 0, **{t.index: k for k, t in enumerate(params.values(), 1)}}
        made = [n for n in made if n.index not in slot]         # its own parameters: made anew
        inside = {n.index for n in made}
        read = [p for n in made for p in n.parents] + [out]
        self.outside = tuple({t.index: t for t in read if t.index not in slot and t.index not in inside}.values())
        slot.update((t.index, k) for k, t in enumerate(self.outside, len(slot)))
        slot.update((n.index, k) for k, n in enumerate(made, len(slot)))
        self.steps, first, cut = [], {}, len(path) + 1          # first: entry key -> slot of its first node
        for n in made:
            key = info = None
            if n.meta is not None:
                m = n.meta
                key, info = m.entry[cut:], (m.op, m.line, m.col, m.call, m.file)
            refs = tuple(slot[p.index] for p in n.parents)
            self.steps.append((n, refs, key, first.get(key), info, n.value if n.op is None else None))
            first.setdefault(key, slot[n.index])
        self.out = slot[out.index]

    def fits(self, x: Tensor) -> bool:
        shape, dtype, requires_grad = self.signature
        return x.shape == shape and x.dtype is dtype and x.requires_grad is requires_grad

    def replay(self, path: str, x: Tensor, params: dict) -> Tensor:
        """Record one more instance at ``path`` (its params already made); return its output."""
        tape = self.tape
        slots = [x, *[params[name] for name in self.names], *self.outside] if self.names else [x, *self.outside]
        for node, refs, key, same, info, value in self.steps:
            # One string per graph entry: a node of the same entry as an earlier one
            # (same: that one's slot) shares its string.
            meta = None if info is None else NodeInfo(
                f"{path}.{key}" if same is None else slots[same].meta.entry, *info)
            parents = (slots[refs[0]],) if len(refs) == 1 else tuple([slots[r] for r in refs])
            slots.append(Tensor(tape, node.op, parents, node.attrs, node.shape, node.dtype,
                                value, node.requires_grad, meta))
        return slots[self.out]


def signature(x: Tensor) -> tuple:
    return x.shape, x.dtype, x.requires_grad
