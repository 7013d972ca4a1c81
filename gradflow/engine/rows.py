"""A reverse sweep for many seeds at once, each seed's gradient kept apart: ``sweep_rows``.

It gives, at the leaves, what one ``Tape.sweep(None, seeds={node: g}, order=...)`` per
seed gives, from one walk over the union of the seeds' ancestors (``waves.plan``, then
``sweep_rows``). Every node carries the gradients of the seeds that reach it as rows (a
seed's gradient on a new leading axis), and the walk goes in waves: a node's wave lies past
every wave of the nodes it feeds, so the nodes of one wave are independent. Where rules
allow it (``stacking``) one call serves many rows: the rows of a trunk that many seeds
reach, and those of same-shaped nodes of one wave (parallel branches), their values stacked
alongside. Any other rule is called once per row. Per seed, the same rules meet the same
numbers, and what reaches a node by several paths is summed in the order the seed's own
sweep adds it.
"""

from __future__ import annotations

import numpy as np

from gradflow.engine.stacking import Pack, file_pack, kind_of, passed_on

# Rows stacked for one call stay under this many bytes, so a call's temporaries stay a few
# times this whatever the number of seeds. Up to here fewer, larger calls measured faster
# (200 stops of 16x16 float64, the analysis with counterfactuals: 64 KiB 1.46x the analysis
# without, 256 KiB to 4 MiB about 1.40x).
BATCH_BYTES = 1 << 19
SEEDED = (float("-inf"), 0)   # a seed comes before whatever a sweep adds to it


def sweep_rows(nodes: list, seeds: list, waves: list, shared=None) -> dict:
    """{leaf index: [(keys, rows, span), ...]}: for seeds ``(key, node, g)``, the gradient each
    seed's own sweep leaves at each leaf it reaches, a row per key; ``span`` is (block, start)
    when the rows are ``block[start:start + len(keys)]``, else None. ``waves`` and ``shared``: the
    seeds' ``plan``'s. A pack for nodes that nothing else reaches goes straight to the next wave
    (``ahead``, see ``file_pack``); without ``shared`` every pack waits in ``pending``."""
    pending, leaves, ahead = {}, {}, []
    file_seeds(seeds, pending, shared, ahead)
    for wave in waves:
        ahead = walk_wave(nodes, wave, pending, ahead, leaves, shared)
    return leaves


def walk_wave(nodes: list, wave: list, pending: dict, ahead: list, leaves: dict, shared) -> list:
    """One wave: what reached its nodes passed on to their inputs; the packs for the next wave.
    A function of its own so that what reached the wave is let go as it returns, before the next
    wave's calls take fresh memory (a wave's rows held into the next took fresh pages)."""
    kinds, packs, pop = {}, {pack: range(len(pack.nodes)) for pack in ahead}, pending.pop
    ahead = []
    for i in (wave if pending else ()):
        chunks = pop(i, None)
        if chunks is None:
            continue
        chunk = chunks[0]
        if len(chunks) > 1:
            take(nodes[i], gather(chunks), kinds, leaves)
        elif len(chunk) == 2:                          # a pack's slot: maybe passed on whole
            slots = packs.get(chunk[0])
            if slots is None:
                packs[chunk[0]] = [chunk[1]]
            else:
                slots.append(chunk[1])
        elif chunk[2].__class__ is tuple:              # one chunk from one node: no key twice
            node = nodes[i]
            if node.op is None:
                take(node, [chunk[:2]], kinds, leaves)
            else:                                      # take() inlined: this runs per node
                kinds.setdefault(kind_of(node), []).append((node, chunk[0], chunk[1]))
        else:
            take(nodes[i], gather(chunks), kinds, leaves)
        if not pending:                                # nothing more in this wave
            break
    for pack, slots in packs.items():
        settle(pack, slots, kinds, leaves)
    for group in kinds.values():
        for batch in group if group[0].__class__ is Pack else batches(group):
            passed_on(batch, pending, shared, ahead)
    return ahead


def file_seeds(seeds: list, pending: dict, shared, ahead: list) -> None:
    """Seeds ``(key, node, g)`` in ``pending``. Those at ops of one stackable kind go as packs,
    as a wave's batches would hold them (passed on whole when they all arrive together; straight
    to the first wave when nothing else reaches them); one array seeded at every node of a pack is a
    read-only broadcast of it, not copies. Any other seed is a chunk of its own."""
    kinds, last, group = {}, None, None
    for key, node, g in seeds:
        kind = kind_of(node)
        g = g if g.__class__ is np.ndarray else np.asarray(g)
        if kind.__class__ is tuple:
            if kind != last:               # seeds of one kind mostly come together: no hashing
                last, group = kind, kinds.setdefault(kind, [])
            group.append((node, [key], g))
        else:
            pending.setdefault(node.index, []).append(([key], g[None], SEEDED))
    for group in kinds.values():
        for run in runs(group, group[0][2].nbytes):
            gs = [g for _, _, g in run]
            same = len(set(map(id, gs))) == 1          # arrays compare by value: ids, not count()
            rows = np.broadcast_to(gs[0], (len(gs),) + gs[0].shape) if same else np.array(gs)
            pack = Pack([node for node, _, _ in run], [keys for _, keys, _ in run], rows,
                        list(range(len(run) + 1)), [SEEDED] * len(run), alike=True)
            file_pack(pack, pending, shared, ahead)


def take(node, pieces: list, kinds: dict, leaves: dict) -> None:
    """File what reached ``node``: a leaf's rows are a result, an op's wait for its kind's calls."""
    if node.op is None:
        leaves[node.index] = [(keys, rows, None) for keys, rows in pieces]
    else:
        kinds.setdefault(kind_of(node), []).extend([(node, keys, rows) for keys, rows in pieces])


def settle(pack: Pack, slots: list, kinds: dict, leaves: dict) -> None:
    """A pack whose every node is here with nothing else, all ops of one kind, is a batch as it
    is; its leaves keep their rows in the pack's block; anything else is taken slot by slot."""
    first = pack.nodes[0]
    if len(slots) == len(pack.nodes) and first.op is not None:
        kind = kind_of(first)
        if pack.alike or kind.__class__ is tuple and [kind_of(node) for node in pack.nodes].count(kind) == len(slots):
            kinds.setdefault(("pack", id(pack)), []).append(pack)
            return
    nodes, keys, rows, starts = pack.nodes, pack.keys, pack.rows, pack.starts
    for s in slots:
        node, start = nodes[s], starts[s]
        if node.op is None:
            leaves[node.index] = [(keys[s], rows[start:starts[s + 1]], (rows, start))]
        else:
            take(node, [(keys[s], rows[start:starts[s + 1]])], kinds, leaves)


def gather(chunks: list) -> list:
    """What reached a node, as pieces (keys, rows) with no key twice. A chunk is (keys, rows,
    whence), or a pack's slot (pack, s); whence is (-child index, input position), one for the
    chunk or one per row. A key that arrives by several paths is summed in whence order: the
    order in which its own sweep adds them."""
    chunks = [chunk if len(chunk) == 3 else chunk[0].chunk(chunk[1]) for chunk in chunks]
    keys = [key for chunk in chunks for key in chunk[0]]
    if len(set(keys)) == len(keys):
        return [(ks, rows) for ks, rows, _ in chunks]
    entries = []
    for ks, rows, whence in chunks:
        entries += zip(whence if whence.__class__ is list else [whence] * len(ks), ks, rows)
    entries.sort(key=lambda entry: entry[0])
    summed = {}
    for _, key, row in entries:
        summed[key] = row if key not in summed else summed[key] + row
    keys, rows = list(summed), list(summed.values())
    step = max(1, BATCH_BYTES // max(rows[0].nbytes, 1))
    return [(keys[k:k + step], np.stack(rows[k:k + step])) for k in range(0, len(keys), step)]


def batches(items: list):
    """``items`` (node, keys, rows) of one kind as packs of at most BATCH_BYTES of rows."""
    for run in runs(items, items[0][2][0].nbytes):
        yield packed(run)


def runs(items: list, row_bytes: int):
    """``items`` (node, keys, rows) in order, in runs whose rows stay within BATCH_BYTES; a run
    holds at least one item (``row_bytes``: one row's bytes)."""
    limit, run, size = max(BATCH_BYTES, row_bytes), [], 0
    for item in items:
        if run and size + item[2].nbytes > limit:
            yield run
            run, size = [], 0
        run.append(item)
        size += item[2].nbytes
    yield run


def packed(items: list) -> Pack:
    rows = items[0][2] if len(items) == 1 else np.concatenate([rows for _, _, rows in items])
    starts = [0]
    for _, keys, _ in items:
        starts.append(starts[-1] + len(keys))
    return Pack([node for node, _, _ in items], [keys for _, keys, _ in items], rows, starts, None)
