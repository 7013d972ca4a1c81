"""Paths for people: the model as graph entries, and every way a parameter reaches a loss.

The tape is folded into one node per *call*: each top-level graph entry is a node,
and the nodes a module call makes belong to the entry that made the call, so two
calls of a shared module (a discriminator on real and on fake data) are two nodes,
never one that merges their inputs. Parameters and inputs are nodes too.
``entry_graph`` gives that picture, each edge marked as carrying gradient, cut (and
by what) or both; ``paths`` counts the paths from a parameter to a loss on it by
dynamic programming and lists at most ``limit`` of them, so a model of many
diamonds costs time linear in its size, not in its (exponential) number of paths.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from itertools import chain


def label(node) -> str | None:
    """The picture node a tape node belongs to: the call that made it, or its own name."""
    meta = node.meta
    if meta is None:
        return None
    return getattr(meta, "call", None) or meta.entry


@dataclass
class Edge:
    """A dependency between two graph entries, and the cuts on it."""
    src: str
    dst: str
    carries: bool = False                       # some tape edge between them carries gradient
    cuts: list = field(default_factory=list)    # [Cut] on the others

    @property
    def kind(self) -> str:
        """flows | partial (some routes flow, some are cut) | cut | none (data with no gradient)."""
        if self.carries:
            return "partial" if self.cuts else "flows"
        return "cut" if self.cuts else "none"

    def routes(self) -> list:
        """The cut lists a path taking this edge can meet: () where gradient flows."""
        return {"flows": [()], "partial": [(), tuple(self.cuts)]}.get(self.kind, [tuple(self.cuts)])


@dataclass
class Step:
    """One entry on a path, with the cuts met on entering it."""
    entry: str
    cuts: list = field(default_factory=list)   # [Cut] met on entering this node


@dataclass
class Path:
    """One way from a parameter to a loss, entry by entry."""
    steps: list                                 # [Step], parameter first, loss last

    @property
    def cut(self) -> bool:
        return any(step.cuts for step in self.steps)

    @property
    def key(self) -> tuple:
        return tuple((step.entry, tuple(c.index for c in step.cuts)) for step in self.steps)


NONE = frozenset()
MAX_CUTS = 8   # cuts kept per edge: a picture needs the places, not thousands of copies of one


def merge(a: frozenset, b: frozenset) -> frozenset:
    """a | b, capped at MAX_CUTS with one cut per place (a repeated block's stop is one
    place), so sets carried back through a long call stay small: linear, not quadratic."""
    if not b or b <= a:
        return a
    if not a:
        return b
    both = a | b
    if len(both) <= MAX_CUTS:
        return both
    kept, seen = [], set()
    for c in sorted(both, key=lambda c: c.index):
        if (c.op, c.file, c.line, c.col) not in seen and len(kept) < MAX_CUTS:
            seen.add((c.op, c.file, c.line, c.col))
            kept.append(c)
    return frozenset(kept)


def places(cuts, model_path: str | None = None, entry: str | None = None) -> list:
    """'op line:col' of each cut ('op FILE:LINE:COL' outside the model file), each place
    once, in order. Given the ``entry`` they sit in, a cut in a node of another name (an
    instance of a repeated block: 'op in block.1.out line:col') says which."""
    def text(c):
        named = "" if entry is None or c.node == entry else f" in {c.node}"
        return f"{c.op}{named} {c.where(model_path).removeprefix('line ')}"
    return list(dict.fromkeys(text(c) for c in cuts))


def entry_graph(model, graph) -> tuple[list, list]:
    """(nodes, edges) of the whole model: parameters, inputs and calls in tape order,
    and the Edges that join them. An edge carries gradient when some tape edge between
    the two does and the consuming call passes it on to its output; the cuts on the
    others (inside the consuming call too) label it."""
    names, edges, cuts = {}, {}, {}
    inside = within_calls(model, graph)
    for node in model.tape.nodes:
        dst = label(node)
        if dst is None:
            continue
        names.setdefault(dst, None)
        passes, cuts_after = inside.get(node.index, (True, NONE))
        for parent, carries in graph.edges(node, every=True):
            src = label(parent)
            if src is None or src == dst:   # constants, or inside one call
                continue
            edge = edges.setdefault((src, dst), Edge(src, dst))
            if not graph.upstream[parent.index]:
                edge.carries = edge.carries or carries   # data: nothing to cut
                continue
            edge.carries = edge.carries or (carries and passes)
            found = cuts_after if carries else merge(cuts_after, frozenset([graph.cut_at(node, parent)]))
            cuts[src, dst] = merge(cuts.get((src, dst), NONE), found)
    for key, edge in edges.items():
        edge.cuts = sorted(cuts.get(key, ()), key=lambda c: c.index)
    return list(names), list(edges.values())


def within_calls(model, graph) -> dict:
    """For each tape node: does its call pass gradient from the node to the call's output,
    and which cuts lie between them (walked back from each call's outputs)."""
    nodes, children = model.tape.nodes, graph.children
    owner = [label(n) for n in nodes]
    losses = {t.index for t in model.losses.values()}
    state = {}
    for node in reversed(nodes):
        i = node.index
        if owner[i] is None:
            continue
        # An output of its call: a loss, or consumed by another call.
        is_output = i in losses or any(owner[c.index] != owner[i] for c in children[i])
        passes, cuts = state.get(i, (False, NONE))
        state[i] = passes, cuts = passes or is_output, cuts
        for parent, carries in graph.edges(node, every=True):
            if owner[parent.index] != owner[i]:
                continue
            extra = cuts if carries else merge(cuts, frozenset([graph.cut_at(node, parent)]))
            old_passes, old_cuts = state.get(parent.index, (False, NONE))
            state[parent.index] = (old_passes or (passes and carries), merge(old_cuts, extra))
    return state


def reaching(edges, roots) -> set:
    """The nodes with a path to one of ``roots`` (the roots included)."""
    into: dict[str, list] = {}
    for e in edges:
        into.setdefault(e.dst, []).append(e.src)
    found, stack = set(roots), list(roots)
    while stack:
        for src in into.get(stack.pop(), ()):
            if src not in found:
                found.add(src)
                stack.append(src)
    return found


def count_paths(out: dict, source: str, target: str) -> dict:
    """node -> how many paths (a partly cut edge counts twice: flowing, and cut) lead from it
    to ``target``, for every node reachable from ``source``: one post-order walk."""
    ways, stack = {target: 1}, [(source, False)]
    while stack:
        name, expanded = stack.pop()
        if name in ways:
            continue
        if expanded:
            ways[name] = sum(len(e.routes()) * ways[e.dst] for e in out.get(name, ()))
            continue
        stack.append((name, True))
        stack.extend((e.dst, False) for e in out.get(name, ()) if e.dst not in ways)
    return ways


def paths(edges, source: str, target: str, limit: int = 20) -> tuple[list, int]:
    """(at most ``limit`` Paths from ``source`` to ``target``, how many there are in all).

    The telling ones come first: a shortest path that gradient flows along (else a
    shortest path), then for each cut on the way a shortest path through it (so every
    cut shows while the limit allows), then the rest in the order the model makes them."""
    out: dict[str, list] = {}
    for e in edges:
        out.setdefault(e.src, []).append(e)
    ways = count_paths(out, source, target)
    if not ways.get(source):
        return [], 0
    found, shown = [], set()
    for hops in chain(telling_paths(edges, out, ways, source, target), every_path(out, ways, source, target)):
        if len(found) >= limit:
            break
        path = make_path(source, hops)
        if path.key not in shown:
            shown.add(path.key)
            found.append(path)
    return found, ways[source]


def shortest_from(out: dict, ways: dict, source: str, flowing: bool = False) -> dict:
    """node -> the edge that first reaches it from ``source`` (breadth first) on the way to
    the target; ``flowing``: along edges that carry gradient only."""
    before = {source: None}
    queue = deque([source])
    while queue:
        for e in out.get(queue.popleft(), ()):
            if ways.get(e.dst) and e.dst not in before and (e.carries or not flowing):
                before[e.dst] = e
                queue.append(e.dst)
    return before


def shortest_to(edges, before: dict, ways: dict, target: str) -> dict:
    """node -> its first edge on a shortest way to ``target`` (breadth first, backwards),
    for the nodes ``before`` reaches."""
    into: dict[str, list] = {}
    for e in edges:
        if e.src in before and ways.get(e.dst):
            into.setdefault(e.dst, []).append(e)
    after, queue = {target: None}, deque([target])
    while queue:
        for e in into.get(queue.popleft(), ()):
            if e.src not in after:
                after[e.src] = e
                queue.append(e.src)
    return after


def telling_paths(edges, out: dict, ways: dict, source: str, target: str):
    """Hops [(node, cuts)] of a shortest flowing path, then of a shortest path through each cut edge."""
    flowing = shortest_from(out, ways, source, flowing=True)
    if target in flowing and source != target:
        hops, node = [], target
        while flowing[node] is not None:
            hops.append((node, ()))
            node = flowing[node].src
        yield hops[::-1]
    before = shortest_from(out, ways, source)
    after = shortest_to(edges, before, ways, target)

    def through(edge, cuts) -> list:
        head, node = [], edge.src
        while before[node] is not None:
            head.append(before[node])
            node = before[node].src
        hops = [(e.dst, e.routes()[0]) for e in reversed(head)] + [(edge.dst, cuts)]
        node = edge.dst
        while after[node] is not None:
            hops.append((after[node].dst, after[node].routes()[0]))
            node = after[node].dst
        return hops

    if source != target:
        yield through(after[source], after[source].routes()[0])
    for e in edges:
        if e.cuts and e.src in before and ways.get(e.dst):
            yield through(e, tuple(e.cuts))


def every_path(out: dict, ways: dict, source: str, target: str):
    """Hops of every path, depth first in the order the model makes its edges."""
    stack = [(source, None)]
    while stack:
        name, trail = stack.pop()
        if name == target:
            hops = []
            while trail is not None:
                node, cuts, trail = trail
                hops.append((node, cuts))
            yield hops[::-1]
            continue
        for e in reversed(out.get(name, ())):
            if ways.get(e.dst):
                stack.extend((e.dst, (e.dst, cuts, trail)) for cuts in reversed(e.routes()))


def make_path(source: str, hops) -> Path:
    """A Path from its hops; a cut already met is not repeated (an argmin cuts its output
    and the index it feeds)."""
    seen, steps = set(), [Step(source)]
    for name, cuts in hops:
        fresh = [c for c in cuts if c not in seen]
        seen.update(fresh)
        steps.append(Step(name, fresh))
    return Path(steps)
