"""Paths for people: every way a parameter reaches a loss, told by graph entry.

Tape paths are long (every op is a node) and, with residual connections,
exponentially many. ``paths`` walks them with a budget, folds each into the
sequence of graph entries it passes (marking the cuts on it) and keeps the
distinct ones. ``entry_graph`` gives the same entry-level view of the whole
model for ``gradflow graph``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_WALK = 20_000     # tape paths looked at before giving up on finding more


@dataclass
class Step:
    entry: str
    cuts: list = field(default_factory=list)   # [Cut] met inside or on entering this entry


@dataclass
class Path:
    steps: list                                 # [Step], parameter first, loss last

    @property
    def cut(self) -> bool:
        return any(step.cuts for step in self.steps)


def paths(graph, param, loss, limit: int = 20) -> tuple[list, bool]:
    """Distinct entry-level paths from ``param`` to ``loss``; True when more may exist."""
    flow = graph.flow(loss)
    if param.index not in flow.reached:
        return [], False
    found: dict[tuple, Path] = {}
    walked, complete = 0, True
    stack = [(param, [param], [])]
    while stack:
        node, trail, cuts = stack.pop()
        if node.index == loss.index:
            walked += 1
            path = fold(trail, cuts, graph)
            found.setdefault(signature(path), path)
            if len(found) >= limit or walked >= MAX_WALK:
                complete = not stack
                break
            continue
        for child in reversed(graph.children[node.index]):
            if child.index not in flow.reached:
                continue
            carries = dict((p.index, c) for p, c in graph.edges(child))
            cut = [] if carries.get(node.index, False) else [(len(trail), graph.cut_at(child, node))]
            stack.append((child, trail + [child], cuts + cut))
    return list(found.values()), not complete


def fold(trail, cuts, graph) -> Path:
    """Collapse consecutive tape nodes of one graph entry into a Step."""
    at = dict(cuts)
    steps: list[Step] = []
    seen = set()
    for position, node in enumerate(trail):
        entry = node.meta.entry if node.meta else f"#{node.index}"
        if not steps or steps[-1].entry != entry:
            steps.append(Step(entry))
        if position in at and at[position] not in seen:   # argmin cuts its output and the index it feeds
            seen.add(at[position])
            steps[-1].cuts.append(at[position])
    return Path(steps)


def signature(path: Path) -> tuple:
    return tuple((s.entry, tuple(c.index for c in s.cuts)) for s in path.steps)


@dataclass
class Edge:
    src: str
    dst: str
    carries: bool = False                       # some tape edge between them carries gradient
    cuts: list = field(default_factory=list)    # [Cut] on the others


def entry_graph(model, graph) -> tuple[list, list]:
    """(entries, edges) of the whole model: parameters, inputs and graph entries in
    tape order, and the Edges that join them. An edge carries gradient when some tape
    edge between the two entries does and the consuming entry passes it on to its
    output; the cuts on the others (inside the consuming entry too) label it."""
    entries, edges = [], {}
    inside = within_entries(model, graph)
    for node in model.tape.nodes:
        if node.meta is None:
            continue
        dst = node.meta.entry
        if dst not in entries:
            entries.append(dst)
        passes, cuts_after = inside.get(node.index, (True, set()))
        for parent, carries in graph.edges(node, every=True):
            if parent.meta is None or parent.meta.entry == dst:   # constants, or inside one entry
                continue
            edge = edges.setdefault((parent.meta.entry, dst), Edge(parent.meta.entry, dst))
            if not graph.upstream[parent.index]:
                edge.carries = edge.carries or carries   # data: nothing to cut
                continue
            edge.carries = edge.carries or (carries and passes)
            found = set(cuts_after) | (set() if carries else {graph.cut_at(node, parent)})
            edge.cuts += sorted(found - set(edge.cuts), key=lambda c: c.index)
    return entries, list(edges.values())


def within_entries(model, graph) -> dict:
    """For each tape node: does its entry pass gradient from the node to the entry's
    output, and which cuts lie between them (walked back from each entry's outputs)."""
    nodes, children = model.tape.nodes, graph.children
    entry = [n.meta.entry if n.meta else None for n in nodes]
    losses = {t.index for t in model.losses.values()}
    state = {}
    for node in reversed(nodes):
        i = node.index
        if entry[i] is None:
            continue
        # An output of its entry: a loss, or consumed by another entry.
        is_output = i in losses or any(entry[c.index] != entry[i] for c in children[i])
        passes, cuts = state.get(i, (False, set()))
        state[i] = passes, cuts = passes or is_output, cuts
        for parent, carries in graph.edges(node, every=True):
            if entry[parent.index] != entry[i]:
                continue
            extra = set() if carries else {graph.cut_at(node, parent)}
            old_passes, old_cuts = state.get(parent.index, (False, set()))
            state[parent.index] = (old_passes or (passes and carries), old_cuts | cuts | extra)
    return state
