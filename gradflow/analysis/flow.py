"""Structural reachability: flows / blocked / unreachable, and which cuts are responsible.

Decided from the graph alone, never from numbers: an edge carries gradient when
its op has a rule for that input (not ``None``) and the input is a float tensor.
For one loss:

- *reached*: nodes with any path to the loss;
- *open*: nodes with a path of gradient-carrying edges to the loss.

A parameter that is open *flows* (numbers may still make it ``zero``); one that
is reached but not open is *blocked*; one not reached is *unreachable*. A cut
*cuts* a parameter from a loss when the cut reaches the loss and the parameter
reaches the cut's input along gradient-carrying edges: the first cut on the way
from the parameter, the one whose removal lets its gradient further. A stop in
front of an argmax, or of another stop, cuts nothing there; an index that an
argmax made, sliced or scaled on its way to a ``take``, is the argmax's cut.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from heapq import heappop, heappush

KIND_OF_OP = {"stop": "explicit", "implicit": "implicit"}


@dataclass(frozen=True)
class Cut:
    """A node that cuts gradient: an explicit stop-gradient or a non-differentiable op."""
    index: int            # tape index
    node: str             # graph entry holding it
    op: str
    kind: str             # explicit | implicit
    line: int
    col: int
    file: str | None = None   # the model file, or an imported model's Python file
    zeros: str | None = None  # where a gradient dies at a product: its factor that is all zeros, a parameter

    def to_dict(self) -> dict:
        return {"node": self.node, "op": self.op, "kind": self.kind, "file": self.file,
                "line": self.line, "col": self.col}

    def where(self, model_path: str | None = None) -> str:
        """'line 12:7' in the model file itself, 'train.py:42:17' elsewhere."""
        if self.file is None or self.file == model_path:
            return f"line {self.line}:{self.col}"
        return f"{self.file}:{self.line}:{self.col}"

    def said(self, model_path: str | None = None) -> str:
        """'matmul in h (line 12:7)', and where it multiplies by a parameter of zeros, which one."""
        text = f"{self.op} in {self.node} ({self.where(model_path)})"
        return text if self.zeros is None else f"{text}, where its factor {self.zeros} is all zeros"


def told(cuts, model_path: str | None = None, shown: int = 3) -> list:
    """Each cut's ``said``, where several share an op and a place (one line of a loop, a module
    repeated) as one: 'stop_gradient in detach_2, detach_5 and detach_8 (train.py:50:8)', naming
    ``shown`` entries and counting the rest."""
    groups = {}
    for c in cuts:
        groups.setdefault((c.op, c.where(model_path), c.zeros), []).append(c)
    texts = []
    for group in groups.values():
        if len(group) == 1:
            texts.append(group[0].said(model_path))
            continue
        texts.append(replace(group[0], node=nodes_of(group, shown)).said(model_path))
    return texts


def nodes_of(cuts, shown: int = 3) -> str:
    """The cuts' nodes, 'detach_2, detach_5 and detach_8', naming ``shown`` and counting the rest."""
    names = [c.node for c in cuts[:shown]] + ([f"{len(cuts) - shown} more"] if len(cuts) > shown else [])
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def cut_of(index: int, node, kind: str) -> Cut:
    """The Cut record of tape node ``node`` (named after the graph entry that holds it)."""
    info = node.meta
    if info is None:
        return Cut(index, f"#{index}", node.op.name, kind, 0, 0)
    return Cut(index, info.entry, node.op.name, kind, info.line, info.col, info.file)


def cut_at_node(node) -> Cut:
    """The Cut record of a node that cuts: explicit for a stop, else implicit (a comparison,
    an argmax, an op that drops an input such as ``where``'s condition)."""
    return cut_of(node.index, node, KIND_OF_OP.get(node.op.kind, "implicit"))


def place_of(node) -> tuple | None:
    """The call that made a tape node: its file, line and column (None for a bare tape's)."""
    info = node.meta
    return None if info is None else (info.file, info.line, info.col)


class NodeSet:
    """A set of tape indices as one byte per node: a million-node tape's open and reached
    sets in 2 MB instead of about 80 MB of hashed ints. ``i in s`` as for a set."""

    __slots__ = ("flags",)

    def __init__(self, flags: bytearray):
        self.flags = flags

    def __contains__(self, index: int) -> bool:
        return self.flags[index] != 0


@dataclass(eq=False, repr=False)
class LossFlow:
    """The structural facts of one loss."""
    reached: NodeSet
    open: NodeSet
    behind: dict          # Cut -> set of parameter names upstream of its cut edges

    def status(self, param) -> str:
        if param.index in self.open:
            return "flows"
        return "blocked" if param.index in self.reached else "unreachable"

    def cuts_of(self, name: str) -> list:
        return self.cuts_by_name.get(name, [])

    @cached_property
    def cuts_by_name(self) -> dict:
        """Parameter name -> the cuts behind which it sits, in tape order: one pass over
        ``behind``, not one per parameter (200 stops by 200 parameters was quadratic)."""
        found: dict = {}
        for cut in sorted(self.behind, key=lambda c: c.index):
            for name in self.behind[cut]:
                found.setdefault(name, []).append(cut)
        return found


class Graph:
    """Adjacency and cut classification of one tape, shared by every loss."""

    def __init__(self, tape, params: dict):
        self.nodes = tape.nodes
        self.params = params
        self.param_names = {t.index: name for name, t in params.items()}
        # Which nodes have a parameter upstream: only edges from those matter. The same
        # pass notes the cut ops, so a long tape is walked once.
        upstream, self.cut_nodes = bytearray(len(self.nodes)), []   # a byte per node, 0 or 1
        for i, node in enumerate(self.nodes):     # tape order: parents come first
            op = node.op
            if op is not None and op.kind in KIND_OF_OP:
                self.cut_nodes.append(node)
            if i in self.param_names:
                upstream[i] = 1
                continue
            for p in node.parents:
                if upstream[p.index]:
                    upstream[i] = 1
                    break
        self.upstream = upstream
        self.rejoins: dict = {}   # tape index of a cut -> rejoined(cut)

    @cached_property
    def children(self) -> list:
        """Per node, the nodes that take it as an input (only where a gradient dies, and for pictures)."""
        children = [[] for _ in self.nodes]
        for node in self.nodes:
            for parent in node.parents:
                children[parent.index].append(node)
        return children

    def edges(self, node, every: bool = False):
        """(parent, carries_gradient) for each input with a parameter upstream (``every``: all inputs)."""
        op = node.op
        if op is None:
            return ()
        return [(p, op.has_rule(k) and p.dtype.kind == "f")
                for k, p in enumerate(node.parents) if every or self.upstream[p.index]]

    def cut_at(self, node, parent) -> Cut:
        """Whom to blame for the cut edge node <- parent: ``node``, where gradient from some
        parameter stops at it; else (an index or a condition that a cut op made, perhaps
        sliced or scaled since) the nearest cut above ``parent`` that such gradient meets."""
        culprit = node
        if not self.open_masks[parent.index]:
            culprit = self.origin(parent) or (parent if parent.op is not None and parent.op.kind in KIND_OF_OP else node)
        return cut_at_node(culprit)

    def origin(self, node):
        """The nearest node at or above ``node`` where gradient from a parameter is cut, or None."""
        cutting, upstream, nodes = self.open_cuts, self.upstream, self.nodes
        seen, heap = {node.index}, [-node.index]
        while heap:                        # nearest first: the highest tape index
            i = -heappop(heap)
            if i in cutting:
                return nodes[i]
            for parent in nodes[i].parents:
                j = parent.index
                if upstream[j] and j not in seen:
                    seen.add(j)
                    heappush(heap, -j)
        return None

    def rejoined(self, cut) -> bool:
        """Does an implicit cut sit inside what one call made, which passes its input's gradient
        on past it? An imported sort is an argsort and a gather of the same rows, a median a NaN
        test and a where between the row and its answer: torch's call gives the index or the test
        no gradient and the values theirs, so 'partly cut' by it tells the user nothing. A cut
        whose answer leaves its call (an argmax another call gathers by) is not such a cut."""
        known = self.rejoins.get(cut.index)
        if known is None:
            known = self.rejoins[cut.index] = cut.kind == "implicit" and self.passes_on(self.nodes[cut.index])
        return known

    def passes_on(self, node) -> bool:
        """Does a node of the same call, after this cut, take gradient from every parameter
        whose gradient the cut stops?"""
        here, stopped, masks = place_of(node), self.open_cuts.get(node.index, 0), self.open_masks
        seen, stack = set(), [child for child in self.children[node.index] if place_of(child) == here]
        while stack:
            child = stack.pop()
            if child.index not in seen:
                seen.add(child.index)
                if stopped & masks[child.index] == stopped:
                    return True
                stack.extend(c for c in self.children[child.index] if place_of(c) == here)
        return False

    def flow(self, loss) -> LossFlow:
        upstream, open_, cut_edges = self.upstream, bytearray(len(self.nodes)), []
        open_[loss.index] = 1
        stack = [loss]
        push = stack.append
        while stack:                       # open set, noting cut edges at its border
            node = stack.pop()
            op = node.op
            if op is None:
                continue
            rules, k = op.vjps, 0          # Graph.edges (and Op.has_rule) inlined: this runs per node
            for parent in node.parents:
                i = parent.index
                if upstream[i]:
                    if rules[0 if op.variadic else k] is not None and parent.dtype.kind == "f":
                        if not open_[i]:
                            open_[i] = 1
                            push(parent)
                    else:
                        cut_edges.append((node, parent))
                k += 1
        reached = self.reaching(open_, [parent for _, parent in cut_edges])
        behind: dict = {}
        if cut_edges:                      # none on the border: no cut reaches the loss
            nodes = self.nodes
            for i, mask in self.open_cuts.items():
                if reached[i]:
                    behind[cut_at_node(nodes[i])] = self.names_in(mask)
        return LossFlow(NodeSet(reached), NodeSet(open_), behind)

    def reaching(self, open_: bytearray, cut_inputs: list) -> bytearray:
        """Every node with any path to the loss: the open ones (whose every input is open or
        behind a cut edge), and what lies above the inputs of cut edges."""
        if not cut_inputs:
            return open_            # nothing lies behind a cut: the same flags, not a copy
        upstream, reached, stack = self.upstream, bytearray(open_), []
        for node in cut_inputs:
            if not reached[node.index]:
                reached[node.index] = 1
                stack.append(node)
        while stack:
            for parent in stack.pop().parents:
                i = parent.index
                if upstream[i] and not reached[i]:
                    reached[i] = 1
                    stack.append(parent)
        return reached

    def names_in(self, mask: int) -> set:
        """Names of the parameters whose bits are set in ``mask``."""
        names = set()
        while mask:                        # only the bits that are set: not a test per parameter
            low = mask & -mask
            names.add(self.bit_names[low.bit_length() - 1])
            mask ^= low
        return names

    @property
    def open_masks(self) -> list:
        """Per node, a bit set of the parameters with a path of gradient-carrying edges to it."""
        return self.open_facts[0]

    @property
    def open_cuts(self) -> dict:
        """Tape index -> the bit set of parameters whose gradient stops at that node: every
        cut that cuts something, wherever it is."""
        return self.open_facts[1]

    @cached_property
    def open_facts(self) -> tuple[list, dict]:
        """``open_masks`` and ``open_cuts`` in one pass in tape order, so every cut's
        parameters cost no walk per cut (a stop repeated in 2,000 blocks took seconds)."""
        bit = {index: 1 << k for k, index in enumerate(self.param_names)}
        masks, cuts, upstream = [0] * len(self.nodes), {}, self.upstream
        for node in self.nodes:
            i = node.index
            if not upstream[i]:
                continue
            mask, op = bit.get(i, 0), node.op
            if op is not None:
                rules, k, stopped = op.vjps, 0, 0
                for parent in node.parents:
                    above = masks[parent.index]
                    if above:
                        if rules[0 if op.variadic else k] is not None and parent.dtype.kind == "f":
                            mask |= above
                        else:
                            stopped |= above
                    k += 1
                if stopped:
                    cuts[i] = stopped
            masks[i] = mask
        return masks, cuts

    @cached_property
    def bit_names(self) -> list:
        return list(self.param_names.values())

    def all_cuts(self) -> list:
        """Every explicit stop and implicit cut op in the graph, in tape order."""
        return list(self.cuts)

    @cached_property
    def cuts(self) -> list:
        return [cut_at_node(node) for node in self.cut_nodes]
