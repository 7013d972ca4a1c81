"""Numbers from the tape: gradient statistics, where a zero gradient dies,
counterfactual norms (every explicit stop as the identity) and the norm each
stop removes on its own.
"""

from __future__ import annotations

import numpy as np

from gradflow.analysis.flow import Cut


def grad_stats(g) -> dict:
    """norm, max |g|, fraction of exact zeros and count of non-finite entries."""
    g = np.asarray(g)
    finite = np.isfinite(g)
    nonfinite = int(g.size - np.count_nonzero(finite))
    with np.errstate(over="ignore", invalid="ignore"):
        norm = float(np.sqrt(np.sum(np.square(g, dtype=np.float64))))
    return {"norm": norm, "max_abs": float(np.max(np.abs(g))) if g.size else 0.0,
            "zero_fraction": float(np.count_nonzero(g == 0) / g.size) if g.size else 1.0,
            "nonfinite": nonfinite}


def all_zero(g) -> bool:
    return g is None or not np.any(g)


def dies_at(graph, grads: list, param, open_: set) -> list:
    """For a parameter on an open path whose gradient is exactly zero: the nodes nearest
    the loss where gradient was still non-zero but what they passed back toward the
    parameter was zero (a dead ReLU, a multiplication by zero, ...)."""
    downstream, stack = {param.index}, [param]
    children = graph.children
    while stack:                            # nodes the parameter feeds through open edges
        node = stack.pop()
        for child in children[node.index]:
            if child.index in open_ and child.index not in downstream:
                downstream.add(child.index)
                stack.append(child)
    places = []
    for i in sorted(downstream, reverse=True):
        node = graph.nodes[i]
        if i == param.index or all_zero(grads[i] if i < len(grads) else None):
            continue
        if any(carries and p.index in downstream and all_zero(grads[p.index])
               for p, carries in graph.edges(node)):
            info = node.meta
            places.append(Cut(i, info.entry, node.op.name, "zero", info.line, info.col))
    return places


def norm_of_difference(grads_a: list, grads_b: list, params: dict) -> float:
    """L2 norm, over all parameters together, of the difference of two gradient sweeps."""
    total = 0.0
    for t in params.values():
        a = grads_a[t.index] if t.index < len(grads_a) else None
        b = grads_b[t.index] if t.index < len(grads_b) else None
        if a is None and b is None:
            continue
        diff = (0 if a is None else a) - (0 if b is None else b)
        total += float(np.sum(np.square(diff, dtype=np.float64)))
    return float(np.sqrt(total))


def grad_norm(grads: list, t) -> float:
    g = grads[t.index] if t.index < len(grads) else None
    return 0.0 if g is None else float(np.sqrt(np.sum(np.square(g, dtype=np.float64))))
