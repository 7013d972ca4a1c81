"""The numbers of a run with every explicit stop opened: each stop's cut_norm
(``cutnorms``) and each pair's counterfactual norm.

Loaded only by the runs that show them (``analyze(counterfactual=True)``), with the
walk behind them (``engine.rows``).
"""

from __future__ import annotations

import numpy as np

from gradflow.analysis.cutnorms import brought_to, cut_norms
from gradflow.analysis.numeric import ancestors, squared_norm, squares_of

STACKED_UP_TO = 4096   # entries: a gradient this small costs more in calls than in arithmetic
STACKED = 1 << 16   # bytes of such gradients stacked at a time (malloc's mmap threshold is 128 KiB)


def counterfactuals(model, grads: list, flow, stops: list, held: set, pairs: dict) -> dict:
    """For one loss (its plain sweep ``grads`` and ``flow``): each of its stops' cut_norm, by tape
    index, and each pair's counterfactual norm, set on ``pairs`` (parameter name -> Pair).
    ``stops``: every explicit stop of the model; ``held``: their indices."""
    norms, extra = cut_norms(model, grads, [c for c in flow.behind if c.kind == "explicit"], held)
    add_counterfactuals(model, stops, grads, pairs, extra)
    return norms


def add_counterfactuals(model, stops: list, grads: list, pairs: dict, extra=None) -> None:
    """Each pair's norm with every explicit stop as the identity.

    Opening the stops changes nothing downstream of them, so the counterfactual
    gradient is the plain one plus a sweep, through every stop, of what the plain
    sweep brought to each stop, started at the stop's input and limited to the
    nodes above the stops: exact, and a fraction of a whole extra backward pass.
    ``extra`` (stop indices, their sweeps' sum), when it covers the same stops, is that result.
    """
    if extra is not None and swept_every_reached(extra[0], stops, grads):
        extra = extra[1]
    else:
        seeds = {}
        for stop in (s for s in stops if brought_to(grads, s) is not None):
            g, source = grads[stop.index], stop.parents[0]
            seeds[source] = g if source not in seeds else seeds[source] + g
        extra = model.tape.sweep(None, through={s.index for s in stops}, seeds=seeds,
                                 order=ancestors(seeds)) if seeds else []
    both, last, group, plains, mores = {}, None, None, len(grads), len(extra)
    for name, t in model.params.items():   # grad_at inlined: this runs per parameter
        i, pair = t.index, pairs[name]
        plain, more = grads[i] if i < plains else None, extra[i] if i < mores else None
        if more is None and plain is not None and pair.status in ("flows", "zero"):
            pair.counterfactual_norm = pair.norm     # no stop above: the norm of the same array
        elif plain.__class__ is more.__class__ is np.ndarray and 0 < plain.size <= STACKED_UP_TO:
            kind = (plain.shape, plain.dtype, more.shape, more.dtype)
            if kind != last:                         # mostly a run of one kind: no hashing
                last, group = kind, both.setdefault(kind, [])
            group.append((pair, plain, more))
        else:
            total = plain if more is None else more if plain is None else plain + more
            pair.counterfactual_norm = 0.0 if total is None else squared_norm(total) ** 0.5
    norms_of_sums(both)


def swept_every_reached(swept: set, stops: list, grads: list) -> bool:
    """Whether ``swept`` (stop indices) holds every stop that a gradient reaches, as cut_norms
    seeds them."""
    if swept.issuperset(s.index for s in stops):   # the usual case: every stop was swept
        return True
    return all(s.index in swept or brought_to(grads, s) is None for s in stops)


def norms_of_sums(both: dict) -> None:
    """Each pair's counterfactual norm from its (pair, plain, more), grouped by shapes and
    dtypes: one add and one call for the norms per run of a group, the same sums as one by one."""
    for group in both.values():
        step = max(1, STACKED // group[0][1].nbytes)   # more from fresh pages costs more than it saves
        for run in (group[k:k + step] for k in range(0, len(group), step)):
            totals = np.array([plain for _, plain, _ in run]) + np.array([more for _, _, more in run])
            for (pair, _, _), square in zip(run, squares_of(totals)):
                pair.counterfactual_norm = square ** 0.5
