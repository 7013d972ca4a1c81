"""The tape: tensors recorded in creation order, an iterative reverse sweep.

A Tape is a list of Tensor nodes. Because every node is appended after its
parents, the list is already in topological order: forward is a walk from the
front, backward a walk from the back. No recursion anywhere, so a chain of a
million ops runs as easily as ten.

Two ways to build:
- eager (the default): each op is computed as it is recorded, as in micrograd;
- lazy (``Tape(eager=False)``): only shapes and dtypes are inferred, so a model
  can be checked and its memory estimated before any array exists; ``run()``
  later fills in the values.

Gradients: ``backward(loss)`` returns one entry per node: the gradient for each
leaf (``None`` where none reaches it); op nodes' gradients are dropped as the
sweep passes them unless ``keep=True``. Each contribution has its parent's dtype
(``w * n`` with an integer ``n`` would otherwise turn a float32 sweep float64). A
rule of ``None`` in the op table means "no gradient through this input" (a cut);
it is never replaced by an array of zeros. Nodes, and what the sweep does to a
rule's gradient, are in ``tensor.py``.
"""

from __future__ import annotations

import numpy as np

from gradflow.engine.ops import OPS, Op, dtype_kind, resolve_op
from gradflow.engine.quiet import quietly
from gradflow.engine.tensor import NO_ATTRS, Tensor, fit, new_object, unbroadcast, values_of


REUSE_BYTES = 1 << 18   # from this size a value's buffer is worth reusing (numpy's own bound for temporaries)
OUT_DTYPES: dict = {}   # (op, tape dtype, *input dtypes) -> output dtype, as Tape.infer finds them


class Tape:
    """A recording of tensors in creation order, with forward and backward sweeps."""

    def __init__(self, dtype=np.float64, eager: bool = True):
        self.dtype = np.dtype(dtype)
        self.eager = eager
        self.nodes: list[Tensor] = []
        self.keep_values: frozenset[int] | set[int] = frozenset()   # nodes whose values run() always holds
        self.failed: Tensor | None = None   # the node whose forward raised in run()

    # -- recording ---------------------------------------------------------
    def leaf(self, value=None, *, shape=None, dtype=None, requires_grad=False, meta=None) -> Tensor:
        """A tensor that no op produced: a parameter, an input or a constant."""
        if value is not None:
            value = np.asarray(value)
            if value.dtype.kind == "f" or dtype_kind(dtype) == "f":
                value = value.astype(self.dtype, copy=False)
            shape, dtype = value.shape, value.dtype
        else:
            dtype = self.dtype if dtype is None or dtype_kind(dtype) == "f" else np.dtype(dtype)
        requires_grad = requires_grad and dtype.kind == "f"
        return Tensor(self, None, (), None, tuple(shape), dtype, value, requires_grad, meta)

    def param(self, value=None, **kw) -> Tensor:
        return self.leaf(value, requires_grad=True, **kw)

    def constant(self, value) -> Tensor:
        return self.leaf(np.asarray(value, dtype=self.dtype))

    def apply(self, op: str | Op, *parents, meta=None, **attrs) -> Tensor:
        """Record ``op(*parents, **attrs)``; numbers among the parents become constants.

        This and ``backward`` are the hot path (one call per node of a model):
        they avoid generators, empty ``**`` calls and repeated lookups on purpose.
        """
        if op.__class__ is str:
            op = OPS.get(op) or resolve_op(op)
        # A stop-gradient's output still "requires grad" so that a counterfactual
        # sweep can pass through it; its rule of None is what cuts.
        requires_grad = False
        for p in parents:
            if p.__class__ is not Tensor:
                parents = tuple(p if isinstance(p, Tensor) else self.constant(p) for p in parents)
                requires_grad = any(p.requires_grad for p in parents)
                break
            if p.requires_grad:
                requires_grad = True
        # One shared empty mapping, not an empty dict kept by every node; one flag
        # (op.plain) tells when there is nothing to bind and no dtype to check.
        if op.plain and not attrs:
            attrs = NO_ATTRS
        else:
            attrs = op.bind_attrs(attrs) if attrs or op.attrs else NO_ATTRS
            if op.int_inputs:
                op.check_dtypes([p.dtype for p in parents])
        if self.eager:
            try:
                if op.fitted:   # one input, no attributes: called as it is, not spread from a tuple
                    value = op.forward(parents[0].value)
                else:
                    values = values_of(parents)
                    value = op.forward(*values, **attrs) if attrs else op.forward(*values)
            except Exception:
                self.infer(op, parents, attrs)  # a ShapeError that names the op, if the shapes are at fault
                raise
            if value.dtype is not self.dtype:  # dtypes are singletons: the common case costs one test
                value, requires_grad = self.conform(op, value, requires_grad)
            # The input's shape, where it is the value's, shared: value.shape would be a new
            # tuple per node, for the cyclic collector to scan while the tape grows.
            shape, dtype = parents[0].shape if op.fitted else value.shape, value.dtype
        else:
            (shape, dtype), value = self.infer(op, parents, attrs), None
            requires_grad = requires_grad and dtype.kind == "f"
        # Tensor.__init__ inlined (the same fields): a frame less per node. One field a
        # statement: a tuple assigned to several fields is built, then taken apart.
        nodes, node = self.nodes, new_object(Tensor)
        node.tape = self
        node.index = len(nodes)
        node.op = op
        node.parents = parents
        node.attrs = attrs
        node.shape = shape
        node.dtype = dtype
        node.value = value
        node.requires_grad = requires_grad
        node.meta = meta
        nodes.append(node)
        return node

    def conform(self, op: Op, value, requires_grad) -> tuple:
        """An eager result in the tape's dtype: (value, requires_grad)."""
        if value.dtype.kind != "f":
            if op.out == "float":  # comparisons, one_hot, floor of an int: floats
                return value.astype(self.dtype), requires_grad
            return value, False  # an integer result (argmax, ops on integer tensors) carries no gradient
        if value.dtype != self.dtype:  # int64 * float32 gives float64
            return value.astype(self.dtype), requires_grad
        return value, requires_grad

    def infer(self, op: Op, parents, attrs) -> tuple:
        """(shape, dtype) of ``op(*parents)`` from the parents' shapes and dtypes alone."""
        # A fitted op's output has its input's shape (the rule is same_shape): shared, not copied.
        shape = parents[0].shape if op.fitted else op.infer_shape(*[p.shape for p in parents], **attrs)
        if op.variadic:   # a key as long as its list of inputs: not worth keeping
            return shape, op.out_dtype([p.dtype for p in parents], self.dtype)
        # The dtype depends on the op, the input dtypes and the tape's alone: worked out once for
        # each such combination, for every tape of the process (a handful of combinations).
        # An Op hashes as itself (it has no __eq__), so an op of the same name made elsewhere
        # (a test's, say) has entries of its own.
        key = (op, self.dtype, *[p.dtype for p in parents])
        dtype = OUT_DTYPES.get(key)
        if dtype is None:
            dtype = OUT_DTYPES[key] = op.out_dtype(list(key[2:]), self.dtype)
        return shape, dtype

    # -- sweeps --------------------------------------------------------------
    @quietly
    def run(self) -> None:
        """Compute every value still missing, front to back (lazy tapes).

        As numpy reuses the temporary of ``h @ w`` for ``h @ w + b``, an op that may
        (``Op.reuses``) writes its result over a large input that only it reads and that no
        rule reads back, whose value then becomes None: no fresh memory to fault in, nor
        held. Nodes in ``keep_values`` (a model's named entries) always hold theirs.
        If a forward raises, ``failed`` is the node it was computing.
        """
        readers, made, node = None, set(), None
        mark = made.add   # what this run computes: a value set before it is not its to write over
        try:
            for node in self.nodes:
                if node.value is None and node.op is not None:
                    mark(node.index)
                    parents, attrs, op = node.parents, node.attrs, node.op  # as in apply: no empty **
                    values = (parents[0].value,) if len(parents) == 1 else values_of(parents)
                    if op.reuses and not attrs and node.size * node.dtype.itemsize >= REUSE_BYTES:
                        readers = readers or self.readers()
                        value = self.forward_over(node, values, readers, made)
                    else:
                        value = op.forward(*values, **attrs) if attrs else op.forward(*values)
                    same = value.dtype is node.dtype or value.dtype == node.dtype
                    node.value = value if same else value.astype(node.dtype)
        except Exception:
            self.failed = node
            raise

    def readers(self) -> list:
        """How many times each node is an input of another."""
        counts = [0] * len(self.nodes)
        for node in self.nodes:
            for p in node.parents:
                counts[p.index] += 1
        return counts

    def forward_over(self, node: Tensor, values: tuple, readers: list, made: set):
        """``node``'s forward, written over the buffer of an input that no one needs after it
        when there is one (see ``run``): an op value of the node's own dtype and shape, that
        this run made (``made``) and whose array that op made (not an input of its own passed
        on, not a view), read by this node alone, once, and read by no rule: neither the
        node's (``Op.reuses``) nor its own."""
        for k, p in enumerate(node.parents):
            v = values[k]
            if (readers[p.index] == 1 and p.index in made and p.op.kind == "differentiable"
                    and "ans" not in p.op.reads and p.index not in self.keep_values
                    and v.base is None and v.flags.writeable and v.shape == node.shape
                    and all(x.dtype == node.dtype for x in values)
                    and not any(v is q.value for q in p.parents)):
                p.value = None
                return node.op.forward(*values, out=v)
        return node.op.forward(*values)

    @quietly
    def backward(self, loss: Tensor, **options) -> list:
        """``sweep(loss, **options)`` with numpy's complaints off and the collector paused."""
        return self.sweep(loss, **options)

    def sweep(self, loss: Tensor, through: frozenset[int] | set[int] = frozenset(),
              keep: bool | set[int] = False, seeds: dict | None = None, order=None) -> list:
        """Reverse sweep from ``loss``: gradient of loss w.r.t. every leaf, or None.
        Callers already inside ``quiet()`` (the analysis, with a sweep per stop) call this
        directly; everyone else calls ``backward``.

        ``through`` names nodes whose cut inputs pass the gradient unchanged, as
        if the stop-gradient there were the identity (used for counterfactuals).
        An op node's gradient is dropped once passed on, as hand-written code
        would, unless ``keep`` asks for every node's (True, to find where one
        dies) or names the nodes whose gradient to hold (a set of indices).
        ``seeds`` ({node: gradient}, each of its node's shape and dtype, as every
        gradient the sweep passes on) starts the sweep from those gradients instead
        of ones at ``loss``; ``order`` (indices, descending) then limits it to the
        nodes that can matter, such as the ancestors of the seeds.
        """
        nodes = self.nodes
        if seeds is None:
            seeds = {loss: np.ones(loss.shape, dtype=loss.dtype)}
        start = max(node.index for node in seeds)
        grads = [None] * (start + 1)
        for node, seed in seeds.items():
            grads[node.index] = seed
        held = range(start + 1) if keep is True else keep or ()   # the nodes whose gradient stays
        for i in range(start, -1, -1) if order is None else order:
            g = grads[i]
            if g is None:
                continue
            node = nodes[i]
            op = node.op
            if op is None:
                continue
            if op.fitted:   # one input, no attributes: its rule's gradient is the input's as it is
                parent, vjp = node.parents[0], op.vjps[0]
                if parent.requires_grad and (vjp is not None or i in through):
                    contrib = g if vjp is None else vjp(g, node.value, parent.value)
                    j = parent.index
                    grads[j] = contrib if grads[j] is None else grads[j] + contrib
            else:
                pass_on(node, g, grads, i in through)
            if i not in held:
                grads[i] = None
        return grads


def pass_on(node: Tensor, g, grads: list, through: bool) -> None:
    """Add to ``grads`` each input's share of ``g``, the gradient of ``node``, in the input's
    dtype and shape (``through``: a cut input takes ``g`` as it is). The sweep's general case."""
    op, parents, attrs, values = node.op, node.parents, node.attrs, None
    # Arguments spelled out for one or two parents (spread: 0): unpacking a tuple
    # into a Python rule (f(*values)) costs more than the rule's own Python.
    spread = 0 if attrs else len(parents)
    # Rules paired with their input's position once per op, not zipped per node.
    for k, vjp in op.numbered_for(len(parents)) if op.variadic else op.numbered:
        parent = parents[k]
        if not parent.requires_grad:
            continue
        if vjp is not None:
            if spread == 1:
                contrib = vjp(g, node.value, parent.value)
            elif spread == 2:
                contrib = vjp(g, node.value, parents[0].value, parents[1].value)
            else:   # once per node: a concat of n inputs must not build n tuples of n
                if values is None:
                    values = values_of(parents)
                contrib = vjp(g, node.value, *values, **attrs)
            if contrib.dtype is not parent.dtype or contrib.shape != parent.shape:
                contrib = fit(contrib, parent)   # a call only when there is something to fit
        elif through:
            contrib = g
        else:
            continue
        j = parent.index
        grads[j] = contrib if grads[j] is None else grads[j] + contrib


__all__ = ["Tape", "Tensor", "unbroadcast", "OPS"]
