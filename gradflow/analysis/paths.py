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

from dataclasses import dataclass, field


def label(node) -> str | None:
    """The picture node a tape node belongs to: the call that made it, or its own name."""
    meta = node.meta
    if meta is None:
        return None
    return getattr(meta, "call", None) or meta.entry


@dataclass
class Edge:
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
    entry: str
    cuts: list = field(default_factory=list)   # [Cut] met on entering this node


@dataclass
class Path:
    steps: list                                 # [Step], parameter first, loss last

    @property
    def cut(self) -> bool:
        return any(step.cuts for step in self.steps)


def entry_graph(model, graph) -> tuple[list, list]:
    """(nodes, edges) of the whole model: parameters, inputs and calls in tape order,
    and the Edges that join them. An edge carries gradient when some tape edge between
    the two does and the consuming call passes it on to its output; the cuts on the
    others (inside the consuming call too) label it."""
    names, edges = [], {}
    inside = within_calls(model, graph)
    for node in model.tape.nodes:
        dst = label(node)
        if dst is None:
            continue
        if dst not in names:
            names.append(dst)
        passes, cuts_after = inside.get(node.index, (True, set()))
        for parent, carries in graph.edges(node, every=True):
            src = label(parent)
            if src is None or src == dst:   # constants, or inside one call
                continue
            edge = edges.setdefault((src, dst), Edge(src, dst))
            if not graph.upstream[parent.index]:
                edge.carries = edge.carries or carries   # data: nothing to cut
                continue
            edge.carries = edge.carries or (carries and passes)
            found = set(cuts_after) | (set() if carries else {graph.cut_at(node, parent)})
            edge.cuts += sorted(found - set(edge.cuts), key=lambda c: c.index)
    return names, list(edges.values())


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
        passes, cuts = state.get(i, (False, set()))
        state[i] = passes, cuts = passes or is_output, cuts
        for parent, carries in graph.edges(node, every=True):
            if owner[parent.index] != owner[i]:
                continue
            extra = set() if carries else {graph.cut_at(node, parent)}
            old_passes, old_cuts = state.get(parent.index, (False, set()))
            state[parent.index] = (old_passes or (passes and carries), old_cuts | cuts | extra)
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
    """(at most ``limit`` Paths from ``source`` to ``target``, how many there are in all)."""
    out: dict[str, list] = {}
    for e in edges:
        out.setdefault(e.src, []).append(e)
    ways = count_paths(out, source, target)
    found, stack = [], [(source, None)] if ways.get(source) else []
    while stack and len(found) < limit:
        name, trail = stack.pop()
        if name == target:
            found.append(unwind(source, trail))
            continue
        for e in reversed(out.get(name, ())):
            if ways.get(e.dst):
                stack.extend((e.dst, (e.dst, cuts, trail)) for cuts in reversed(e.routes()))
    return found, ways.get(source, 0)


def unwind(source: str, trail) -> Path:
    """A Path from the linked trail (node, cuts, previous); a cut already met is not repeated
    (an argmin cuts its output and the index it feeds)."""
    steps = []
    while trail is not None:
        name, cuts, trail = trail
        steps.append((name, cuts))
    seen, path = set(), [Step(source)]
    for name, cuts in reversed(steps):
        fresh = [c for c in cuts if c not in seen]
        seen.update(fresh)
        path.append(Step(name, fresh))
    return Path(path)
