"""Each explicit stop's cut_norm, and the sum of the sweeps behind them.

A stop's cut_norm is the parameter norm of one exact backward sweep, seeded at the
stop's input with the gradient the plain pass brought to the stop, over that input's
ancestors. The sweeps together stay within CUT_NORM_PASSES passes over the tape: each
covers the stop's ancestors, so thousands of stops in one chain would be quadratic.

Two ways to the same numbers. When every sweep fits the budget and sharing makes it pay,
all of them run as one walk (``engine.rows``), or a few for many rows: a trunk many stops
share is walked once per walk, their gradients stacked there. Otherwise one sweep per stop,
in order, until the budget runs out.
"""

from __future__ import annotations

import math

import numpy as np

from gradflow.analysis.numeric import ParamsAmong, ancestors, params_norm, squares_of
from gradflow.engine.rows import sweep_rows
from gradflow.engine.waves import calls, plan

CUT_NORM_PASSES = 50   # the sweeps behind cut_norm may visit at most this many times the tape


def cut_norms(model, grads, cuts: list, stops: set) -> tuple[dict, tuple | None]:
    """Each stop's cut_norm, by the stop's tape index (an int: no hashing of a Cut per stop):
    0.0 where no gradient reaches the stop, None past the budget (not computed, as in
    structural mode).

    Also the sum of those sweeps, which is the counterfactual sweep when each stop was swept,
    none lies above another (a sweep would stop there, the counterfactual one passes) and every
    sweep is finite (so sums of infinities cannot differ): (stop indices swept, sum); else None."""
    nodes, norms, seeded = model.tape.nodes, {}, []
    for cut in cuts:
        stop = nodes[cut.index]
        g = brought_to(grads, stop)
        if g is None:
            norms[cut.index] = 0.0
        else:
            seeded.append((cut, stop.parents[0], g))
    budget = CUT_NORM_PASSES * len(nodes)
    sources = [source for _, source, _ in seeded]
    order = ancestors(sources) if len(seeded) > 1 else ()
    walk = plan(nodes, sources, order, budget) if order else None
    if walk is not None and together_pays(walk, len(order), len(seeded), nodes):
        found, total = walked(model, seeded, walk, stops.isdisjoint(order))
    else:
        found, total = cut_norms_one_by_one(model, seeded, stops, budget)
    norms.update(found)
    return norms, None if total is None else ({cut.index for cut, _, _ in seeded}, total)


def brought_to(grads: list, stop):
    """The gradient the plain sweep brought to ``stop``, when there is one to sweep on from the
    stop's input (which needs a gradient); else None."""
    g = grads[stop.index] if stop.index < len(grads) else None
    return g if g is not None and stop.parents[0].requires_grad else None


ROWS_HELD = 256 * 1024 ** 2   # bytes of gradient rows the walk may hold; a sweep at a time holds one


def together_pays(walk, nodes: int, stops: int, tape_nodes: list) -> bool:
    """Whether one walk for all stops costs less than a sweep per stop, by a rough count in
    microseconds: the walk pays per node and per call (a call serves a wave's nodes of one op),
    a sweep per visit and per stop. A lone tower of nodes is swept as before; a trunk shared by
    many stops, stops above stops, or parallel branches of one shape are walked together, unless
    their rows (a parameter's gradient for every stop above it) would not fit in ROWS_HELD."""
    if walk.held > ROWS_HELD:
        return False
    budget = 5 * walk.visits + 40 * stops - 2 * nodes
    # There are no more calls than nodes: they are counted only when that bound does not decide.
    return 8 * nodes < budget or 8 * calls(tape_nodes, walk.waves) < budget


# Bytes of rows (Plan.held) one walk holds, about: stops walked in as few groups as keep under it,
# each group's memory reused by the next (200 stops of 16x16 float64 are one group; 1000, three).
GROUP_HELD = 1 << 21
# glibc's malloc gives a freed block back to the system once the free memory at the top of its
# heap passes twice its mmap threshold, which starts at 128 KiB and rises to the size of any larger
# mapped block freed, up to 32 MiB (mallopt(3)). The walk's rows, freed after every analysis, then
# came back as fresh pages the next time (1.5 MB for 200 stops, 0.9 ms): one block of a group's
# size, allocated and freed untouched, raises the threshold first. Elsewhere, one allocation more.
# At most 31 MiB: a block of 32 MiB asked for is, with its header and page, past the maximum,
# and leaves the threshold where it was.
THRESHOLD_MAX = 31 << 20


def walked(model, seeded: list, walk, apart: bool) -> tuple[dict, list | None]:
    """Each seeded stop's cut_norm from its rows at the parameters; the sum of the stops' sweeps,
    or None (``apart``: no stop lies above another).

    The stops are walked in groups, in order, each group's rows taken in before the next walks,
    in memory the allocator keeps (see THRESHOLD_MAX)."""
    nodes, count = model.tape.nodes, len(seeded)
    groups = -(-walk.held // GROUP_HELD)
    size = -(-count // groups) if groups > 1 else count
    np.empty(min(walk.held // max(groups, 1), THRESHOLD_MAX), dtype=np.uint8)   # and freed at once
    squares = [0.0] * count
    total = [None] * len(nodes) if apart else None
    for first in range(0, count, size):
        group = [(k, seeded[k][1], seeded[k][2]) for k in range(first, min(first + size, count))]
        sums_of_rows(model, sweep_rows(nodes, group, walk.waves, walk.shared), squares, total)
    norms = {cut.index: squares[k] ** 0.5 for k, (cut, _, _) in enumerate(seeded)}
    if total is None or not all(map(math.isfinite, squares)):
        return norms, None
    return norms, total


def sums_of_rows(model, leaves: dict, squares: list, total: list | None) -> None:
    """A walk's rows at the parameters added to each stop's sum of ``squares`` and to ``total``,
    the sum of the sweeps (None: not kept), in one pass over the parameters."""
    blocks, get, summed = {}, leaves.get, set()
    for t in model.params.values():       # in the model's order, as each stop's own sum
        pieces = get(t.index)
        if pieces is None:
            continue
        for keys, rows, span in pieces:
            done, start = row_squares(rows, span, blocks)
            if len(keys) == 1:            # a branch's leaf: one stop's row
                squares[keys[0]] += done[start]
            else:
                for key, square in zip(keys, done[start:start + len(keys)]):
                    squares[key] += square
        if total is not None and t.index not in summed:   # a tensor under two names: summed once
            summed.add(t.index)
            total[t.index] = sum_of_rows(pieces, total[t.index])


def sum_of_rows(pieces: list, before=None):
    """The sum of a leaf's rows in key order, after ``before`` (an earlier group's, or None): as
    one stop's sweep was added after another's."""
    keys, rows, _ = pieces[0]
    if len(pieces) == 1 and (len(keys) == 1 or all(a < b for a, b in zip(keys, keys[1:]))):
        if before is None:
            return rows[0] if len(keys) == 1 else sum_in_order(rows)
        return sum_in_order(np.concatenate((before[None], rows)))
    ordered = sorted([(key, row) for keys, rows, _ in pieces for key, row in zip(keys, rows)],
                     key=lambda entry: entry[0])
    return sum_in_order(([] if before is None else [before]) + [row for _, row in ordered])


def sum_in_order(rows):
    """``((rows[0] + rows[1]) + rows[2]) + ...`` (rows of one shape and dtype, a list or the first
    axis of an array): the same adds in the same order, into one array instead of a new one
    per add. Not ``np.sum`` over stacked rows as such, whose pairwise summation may group them
    otherwise: see ``rows_in_turn``."""
    if rows_in_turn(rows):
        return np.add.reduce(rows, axis=0, initial=-0.0)
    total = np.add(rows[0], rows[1], out=np.empty_like(rows[0]))
    for k in range(2, len(rows)):
        np.add(total, rows[k], out=total)
    return total


def rows_in_turn(rows) -> bool:
    """Whether ``np.add.reduce(rows, axis=0, initial=-0.0)`` adds the rows one after another, as
    ``sum_in_order``: rows of one C-contiguous block, each more than one entry. numpy sums pairwise
    only along the axis that is fast in memory, here inside a row, so along the first axis it
    adds each row in turn to the running sum, entry by entry (ten times fewer calls for 200 rows).
    Started from -0.0, which leaves any number as it is, not from 0.0, which turns -0.0 into 0.0."""
    return rows.__class__ is np.ndarray and rows.ndim > 1 and rows.size > len(rows) and rows.flags.c_contiguous


def row_squares(rows, span, blocks: dict) -> tuple[list, int]:
    """Each row's sum of squares (in float64), as a list and where ``rows``' first lies in it:
    rows that lie in a larger block (``span``) are read off that block's, computed once
    (``blocks``, by the block's id) for all the leaves whose rows it holds."""
    if span is None:
        return squares_of(rows), 0
    done = blocks.get(id(span[0]))
    if done is None:
        done = blocks[id(span[0])] = squares_of(span[0])
    return done, span[1]


def cut_norms_one_by_one(model, seeded: list, stops: set, budget: int) -> tuple[dict, list | None]:
    """One sweep per seeded stop while the budget lasts; the sum of the sweeps, or None."""
    tape, norms, params = model.tape, {}, ParamsAmong(model.params)
    total = [None] * len(tape.nodes)
    for cut, source, g in seeded:
        order = ancestors([source]) if budget > 0 else ()
        budget -= len(order)
        if budget < 0 or not order:
            norms[cut.index], total = None, None
            continue
        found = params.among(order)
        swept = tape.sweep(None, seeds={source: g}, order=order)
        norms[cut.index] = norm = params_norm(swept, found)
        if total is not None and math.isfinite(norm) and stops.isdisjoint(order):
            for i in dict.fromkeys(t.index for t in found):   # a tensor under two names: once
                add_into(total, i, swept[i])
        else:
            total = None
    return norms, total


def add_into(grads: list, index: int, g) -> None:
    if g is not None:
        grads[index] = g if grads[index] is None else grads[index] + g
