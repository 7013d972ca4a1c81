"""The plan of one walk for many seeds (``rows.sweep_rows``): its nodes in waves, and what it costs.

A node's wave lies past every wave of the nodes it feeds, so the nodes of one wave are
independent; the counts (and ``calls``) let the caller weigh the walk against a sweep per seed.
"""

from __future__ import annotations

import math
from typing import NamedTuple


class Plan(NamedTuple):
    waves: list      # the indices of the walk, in waves
    visits: int      # nodes that one sweep per seed, over its ancestors, would visit in all
    held: int        # bytes of rows at most: at every leaf (kept to the end), at the widest op node
    shared: set      # the nodes more than one edge or seed of the walk reaches; the rest, one


def plan(nodes: list, sources: list, order, limit: int | None = None) -> Plan | None:
    """The walk from ``sources`` (the seeds' nodes) over ``order`` (node indices, descending,
    covering every ancestor of the sources); None past ``limit`` visits. A node's bits say
    which sources lie below it (each sets one); its wave is one past the latest wave it feeds."""
    # Per node waiting to be reached, [bits, wave] in one list: one lookup where two dicts
    # took two. Popped once reached: only the frontier is kept.
    state, waves, visits, leaves, widest, shared = {}, [], 0, 0, 0, set()
    limit = math.inf if limit is None else limit
    for k, node in enumerate(sources):
        entry = state.setdefault(node.index, [0, 0])
        if entry[0]:                                # seeded twice
            shared.add(node.index)
        entry[0] |= 1 << k
    pop, get = state.pop, state.get
    for i in order:
        mask, wave = pop(i, (0, 0))
        count = mask.bit_count()
        visits += count
        if visits > limit:
            return None
        if wave < len(waves):
            waves[wave].append(i)
        else:
            waves.append([i])
        node = nodes[i]
        if node.op is None:
            leaves += count * math.prod(node.shape) * node.dtype.itemsize   # Tensor.size, inlined
            continue
        if count > 1:
            widest = max(widest, count * math.prod(node.shape) * node.dtype.itemsize)
        below = wave + 1
        for parent in node.parents:
            if parent.requires_grad:
                entry = get(parent.index)
                if entry is None:
                    state[parent.index] = [mask, below]
                else:                               # a source, or reached again
                    shared.add(parent.index)
                    entry[0] |= mask
                    if entry[1] < below:
                        entry[1] = below
    return Plan(waves, visits, leaves + widest, shared)


def calls(nodes: list, waves: list) -> int:
    """(wave, op) pairs of a plan's ``waves``: about how many calls the walk makes. Apart from
    the plan: most often no more than an upper bound of it is needed."""
    return sum(len({nodes[i].op.name for i in wave if nodes[i].op is not None}) for wave in waves)
