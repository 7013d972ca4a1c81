"""Numbers from the tape: gradient statistics, where a zero gradient dies,
and the sweeps behind counterfactual norms (every explicit stop as the identity)
and the norm each stop removes on its own.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace

import numpy as np

from gradflow.analysis.flow import cut_of
from gradflow.engine.tape import pass_on


BLOCK = 1 << 17   # entries per block of a large gradient: one read from memory serves every pass
MAX, MIN = np.maximum.reduce, np.minimum.reduce
TAKEN_WHOLE = 1 << 12   # entries up to which a gradient is taken whole, with no scratch arrays


def grad_stats(g) -> dict:
    """norm, max |g|, fraction of exact zeros and count of non-finite entries.

    Few passes and no temporaries of the gradient's size in the usual case: a dot
    product for the norm, which is finite exactly when every entry is, so entries
    are only tested for finiteness when it is not. A large gradient is taken a block
    at a time, so its passes read memory once (its norm sums the blocks' squares).
    """
    g = np.asarray(g)
    if not g.size:
        return {"norm": 0.0, "max_abs": 0.0, "zero_fraction": 1.0, "nonfinite": 0}
    flat = g.reshape(-1)
    if flat.size <= TAKEN_WHOLE:   # one pass each and no scratch: making it would cost more
        squares, high, low = squared_norm(flat), MAX(flat), MIN(flat)
        zeros = flat.size - np.count_nonzero(flat)
    else:
        squares, high, low, zeros = block_sums(flat)
    norm = squares ** 0.5
    if math.isfinite(norm):
        # + 0.0: |g| has no sign, but max and min of signed zeros keep one, which one
        # depending on the blocks, so an all-zero gradient's max |g| is always 0.0.
        nonfinite, max_abs = 0, float(max(high, -low)) + 0.0
    else:
        nonfinite = int(g.size - np.count_nonzero(np.isfinite(g)))
        max_abs = float(np.max(np.abs(g)))
    return {"norm": norm, "max_abs": max_abs, "zero_fraction": float(zeros / g.size), "nonfinite": nonfinite}


def block_sums(flat) -> tuple:
    """(sum of squares, max, min, count of zeros) of a large flat gradient, a block at a time,
    with scratch for one block made once: zeros are counted on a mask (much faster than
    count_nonzero on floats), float32 squares are summed in float64."""
    squares, highs, lows, zeros = 0.0, [], [], 0
    wide = None if flat.dtype == np.float64 else np.empty(min(BLOCK, flat.size))
    hits = np.empty(min(BLOCK, flat.size), dtype=bool)
    for start in range(0, flat.size, BLOCK):
        part = flat[start:start + BLOCK]
        if part.size < hits.size:   # the last block
            hits, wide = hits[:part.size], None if wide is None else wide[:part.size]
        if wide is not None:
            np.copyto(wide, part)
        squares += float(np.dot(part, part) if wide is None else np.dot(wide, wide))
        highs.append(MAX(part))     # the ufuncs' reduce: no Python layer per block
        lows.append(MIN(part))
        zeros += np.count_nonzero(np.equal(part, 0, out=hits))
    return squares, max(highs), min(lows), zeros


def squared_norm(g) -> float:
    """Sum of squares in float64, as one dot product (float32 gradients are widened first).
    An overflow is a finding, not a warning: the analysis runs inside ``engine.quiet()``."""
    flat = g.ravel() if g.__class__ is np.ndarray else np.ravel(g)   # the method: no dispatch
    if flat.dtype != np.float64:
        flat = flat.astype(np.float64)
    return float(np.dot(flat, flat))


def squares_of(rows) -> list:
    """``squared_norm`` of each row (an array's first axis), in one call."""
    flat = rows.reshape(len(rows), -1)
    if flat.dtype != np.float64:
        flat = flat.astype(np.float64)
    return np.einsum("ij,ij->i", flat, flat).tolist()


def all_zero(g) -> bool:
    return g is None or not np.any(g)


def dies_at(graph, grads: list, param, open_) -> list:
    """For a parameter on an open path whose gradient is exactly zero: where it dies. From the
    parameter, through open edges, the nodes whose gradient is zero too; the nodes they feed
    whose gradient is not (a dead ReLU, a multiplication by zero, ...) are where it dies, when
    what such a node alone passes back is zero. Where non-zero shares meet and cancel, that
    node is named instead (none, at the parameter itself). Only the zero region is walked,
    not everything after the parameter: a deep model pays for what is dead, not its depth."""
    children = graph.children
    zero, stack, boundary = {param.index}, [param], {}
    while stack:
        node = stack.pop()
        for child in children[node.index]:
            i = child.index
            if i not in open_ or i in zero or i in boundary:
                continue
            if all_zero(grads[i] if i < len(grads) else None):
                zero.add(i)
                stack.append(child)
            else:
                boundary[i] = child
    places, cancelled = [], {}
    for i in sorted(boundary, reverse=True):
        node = boundary[i]
        dead = [p for p, carries in graph.edges(node) if carries and p.index in zero]
        if not dead:
            continue
        share = defaultdict(lambda: None)   # what this node alone passes back (only its inputs')
        pass_on(node, grads[i], share, False)
        if any(all_zero(share[p.index]) for p in dead):
            places.append(replace(cut_of(i, node, "zero"), zeros=zero_factor(graph, node, zero)))
        else:   # it passes gradient on, which other nodes' shares cancel where they add up
            cancelled.update((p.index, p) for p in dead)
    places += [cut_of(i, p, "zero") for i, p in sorted(cancelled.items(), reverse=True)
               if p.op is not None and not renamed(p, param) and all(c.index != i for c in places)]
    return places


PRODUCTS = frozenset({"mul", "matmul", "linear", "conv2d"})   # a factor of zeros passes zero to the others
REARRANGED = frozenset({"transpose", "permute", "reshape", "flatten", "expand_dims", "squeeze", "broadcast_to",
                        "getitem"})


def zero_factor(graph, node, zero) -> str | None:
    """The parameter whose zeros make a product pass zero back (LoRA's B at its init, a gate or
    scale initialised to 0), seen through rearrangements such as its transpose; else None. The
    parameter itself must be all zeros: a zero entry taken out of it is not named as the whole."""
    if node.op.name not in PRODUCTS:
        return None
    for factor in node.parents[:2]:
        if factor.index in zero or factor.value is None or np.any(factor.value):
            continue
        while factor.op is not None and factor.op.name in REARRANGED:
            factor = factor.parents[0]
        if factor.index in graph.param_names and not np.any(factor.value):
            return graph.param_names[factor.index]
    return None


def renamed(node, param) -> bool:
    """Is ``node`` the parameter under another name, as far as its gradient goes: the parameter
    plus terms that pass none (``p + no_grad(new - p)``, an imported write under no_grad), one
    or more times? Shares that cancel there cancel in the parameter itself."""
    while node is not param:
        if node.op is None or node.op.name != "add":
            return False
        passing = [q for q in node.parents if q.requires_grad and (q.op is None or q.op.kind != "stop")]
        if len(passing) != 1:
            return False
        node = passing[0]
    return True


def params_norm(grads: list, params) -> float:
    """L2 norm, over the parameter tensors ``params`` together, of one gradient sweep."""
    total = 0.0
    for t in params:
        g = grad_at(grads, t)
        if g is not None:
            total += squared_norm(g)
    return total ** 0.5


class ParamsAmong:
    """The parameters among a sweep's nodes, in the model's order: a small sweep per stop
    then costs no visit to every parameter, and its norm sums in the same order."""

    def __init__(self, params: dict):
        self.tensors = list(params.values())
        self.positions: dict = {}
        for k, t in enumerate(self.tensors):
            self.positions.setdefault(t.index, []).append(k)

    def among(self, indices) -> list:
        positions = self.positions
        return [self.tensors[k] for k in sorted(k for i in indices if i in positions for k in positions[i])]


def grad_at(grads: list, t):
    """The gradient of tensor ``t`` in a sweep (None where none reached it)."""
    return grads[t.index] if t.index < len(grads) else None


def ancestors(nodes) -> list:
    """Indices of ``nodes`` and every node upstream of them that can carry gradient, last first:
    the order of a backward sweep that starts from gradients seeded at ``nodes``."""
    seen = {n.index for n in nodes}
    stack = list(nodes)
    while stack:
        for parent in stack.pop().parents:
            if parent.requires_grad and parent.index not in seen:
                seen.add(parent.index)
                stack.append(parent)
    return sorted(seen, reverse=True)
