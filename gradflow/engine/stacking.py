"""One call for many rows: which nodes' rules may take a leading axis of rows (STACKABLE,
``kind_of``), and the calls that pass a batch's rows on to its inputs (``passed_on``), for
the walk in ``rows``.
"""

from __future__ import annotations

import numpy as np

from gradflow.engine.tensor import fit

# Ops whose every rule only broadcasts g and the inputs against each other, so a leading
# axis of rows (on g, and on any input stacked the same way) passes through, each row what
# the rule gives for that row alone. Not reductions, reshapes, transposes or anything that
# places g's axes itself. A test checks every op listed; others are called once per row.
STACKABLE = frozenset({
    "add", "sub", "mul", "div", "pow", "neg", "matmul",
    "exp", "log", "log1p", "sqrt", "square", "abs", "sin", "cos", "tanh", "sigmoid", "relu",
    "leaky_relu", "elu", "gelu", "silu", "softplus", "clip", "hardtanh", "maximum", "minimum", "where",
    "grad_scale", "grad_reverse",
})


def stacks(node) -> bool:
    """Whether ``node``'s rules may be called on rows. matmul only between matrices: numpy
    treats a vector operand apart, and rows would turn it into a matrix."""
    name = node.op.name
    if name == "matmul":
        return len(node.parents[0].shape) >= 2 and len(node.parents[1].shape) >= 2
    return name in STACKABLE


class Pack:
    """What one call passes to inputs the batch's nodes do not share: ``rows[starts[s]:
    starts[s + 1]]`` go to ``nodes[s]``, for ``keys[s]``, from the child ``whence[s]``. When
    those inputs are again nodes of one kind in one wave (parallel branches), the pack is
    their next batch as it is: no row is split off and put back together. ``alike``: its nodes
    are known to be ops of one kind (seeds filed together)."""

    __slots__ = ("nodes", "keys", "rows", "starts", "whence", "alike")

    def __init__(self, nodes, keys, rows, starts, whence, alike=False):
        self.nodes, self.keys, self.rows, self.starts, self.whence = nodes, keys, rows, starts, whence
        self.alike = alike

    def rows_of(self, s: int):
        return self.rows[self.starts[s]:self.starts[s + 1]]

    def chunk(self, s: int) -> tuple:
        return self.keys[s], self.rows_of(s), self.whence[s]


def kind_of(node):
    """Nodes of one kind in one wave share their rules' calls: same op, shapes and dtypes.
    Spelled out for one or two inputs, the usual case, and ``stacks`` with it: it runs for
    every node of a wave."""
    op = node.op
    if op is None or node.attrs or op.name not in STACKABLE:
        return node.index             # alone
    parents = node.parents
    if len(parents) == 1:
        p = parents[0]
        return op.name, node.shape, node.dtype, p.shape, p.dtype, p.requires_grad
    if len(parents) == 2:
        p, q = parents
        if op.name == "matmul" and (len(p.shape) < 2 or len(q.shape) < 2):
            return node.index         # alone: see stacks()
        return (op.name, node.shape, node.dtype, p.shape, p.dtype, p.requires_grad,
                q.shape, q.dtype, q.requires_grad)
    return op.name, node.shape, node.dtype, *[(p.shape, p.dtype, p.requires_grad) for p in parents]


def passed_on(batch: Pack, pending: dict, shared=None, ahead=None) -> None:
    """Each input of the batch's nodes that takes gradient gets its chunk in ``pending``, in the
    inputs' order: one call for all rows where the rules allow it, else one per row. A pack for
    inputs nothing else reaches goes to ``ahead`` instead (see ``file_pack``)."""
    first = batch.nodes[0]
    if stacks(first) and len(batch.rows) > 1:
        side_by_side(batch, pending, shared, ahead)
        return
    for s, node in enumerate(batch.nodes):   # one node: kinds that do not stack are single nodes
        keys, rows = batch.keys[s], batch.rows_of(s)
        values, ans, attrs = [p.value for p in node.parents], node.value, node.attrs
        for k, vjp in node.op.numbered_for(len(node.parents)):
            parent = node.parents[k]
            if vjp is not None and parent.requires_grad:
                contrib = [fit(vjp(g, ans, *values, **attrs), parent) for g in rows]
                rows_out = contrib[0][None] if len(rows) == 1 else np.stack(contrib)
                pending.setdefault(parent.index, []).append((keys, rows_out, (-node.index, k)))


def side_by_side(batch: Pack, pending: dict, shared, ahead) -> None:
    """``passed_on`` with one call per rule: each node's value and inputs repeated for its
    rows, alongside them; what all the batch's nodes share is passed as it is."""
    nodes, first, starts = batch.nodes, batch.nodes[0], batch.starts
    # A node's rows counted only when some node has several (parallel branches have one each).
    counts = None if starts[-1] == len(nodes) else [b - a for a, b in zip(starts, starts[1:])]
    alone = nodes.count(first) == len(nodes)          # Tensors compare by identity
    reads = first.op.reads   # values no rule reads are not stacked (nor held: see Tape.run)
    ans = (None if "ans" not in reads else first.value if alone else
           stacked([node.value for node in nodes], counts, first.shape))
    values, inputs = [], []
    for k, parent in enumerate(first.parents):
        inputs.append(None if alone else [node.parents[k] for node in nodes])
        if inputs[k] is not None and inputs[k].count(parent) == len(nodes):
            inputs[k] = None                           # shared by every node
        values.append(None if "inputs" not in reads else parent.value if inputs[k] is None else
                      stacked([p.value for p in inputs[k]], counts, first.shape))
    for k, vjp in first.op.numbered_for(len(first.parents)):
        parent = first.parents[k]
        if vjp is None or not parent.requires_grad:
            continue
        contrib = fit(vjp(batch.rows, ans, *values, **first.attrs), parent, rows=1)
        whence = (-first.index, k) if alone else [(-node.index, k) for node in nodes]
        if inputs[k] is None:
            pass_shared(batch, counts, contrib, whence, pending.setdefault(parent.index, []))
            continue
        file_pack(Pack(inputs[k], batch.keys, contrib, starts, whence), pending, shared, ahead)


def file_pack(pack: Pack, pending: dict, shared, ahead) -> None:
    """A pack in ``pending``, a slot per node; or whole to ``ahead`` when its nodes are not
    ``shared`` (the plan's: nothing else reaches them) and each is in it once (a node's pieces
    may be several items of one batch). Such nodes' one child lies in the wave of the call that
    made the pack, so they all lie in the next wave and arrive there whole with nothing else."""
    if shared is not None:
        indices = [node.index for node in pack.nodes]
        if shared.isdisjoint(indices) and len(set(indices)) == len(indices):
            ahead.append(pack)
            return
    for s, node in enumerate(pack.nodes):
        chunks = pending.get(node.index)
        if chunks is None:
            pending[node.index] = [(pack, s)]
        else:
            chunks.append((pack, s))


def pass_shared(batch: Pack, counts: list | None, contrib, whence, chunks: list) -> None:
    """The rows for an input every node of ``batch`` shares, as one chunk, from the child each
    row came from (``whence``: one child, or one per node, repeated per row)."""
    if counts is None:                                 # a row per node
        chunks.append(([keys[0] for keys in batch.keys], contrib, whence))
    else:
        keys = [key for ks in batch.keys for key in ks]
        if whence.__class__ is list:
            whence = [w for w, c in zip(whence, counts) for _ in range(c)]
        chunks.append((keys, contrib, whence))


def stacked(values: list, counts: list | None, out_shape: tuple):
    """``values`` one after another on a new leading axis, each ``counts`` times (None: once),
    with axes of length 1 after it up to ``out_shape``'s number of axes (so broadcasting lines
    them up)."""
    block = np.array(values)
    missing = len(out_shape) + 1 - block.ndim
    if missing:
        block = block.reshape(block.shape[:1] + (1,) * missing + block.shape[1:])
    return block if counts is None else np.repeat(block, counts, axis=0)
