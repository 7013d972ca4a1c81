"""The in-place writes of an exported fx graph, read without translating them.

Which tensor each write changes (its root: the tensor that owns the memory), all of it
or, through a view, part of it, and the other names its memory goes by (views, writes,
a block's output of its write). export rewires only the written name's later uses to the
write, so a read through another name sees the value from before it: where each whole
write's new value is read (its span), which views taken before it are then stale, and
which write into part of a tensor is read again through another name.
"""

from __future__ import annotations

import bisect
import operator
from dataclasses import dataclass

import torch

from gradflow.importers.torch.fxgraph import NO_GRAD_HOP, aliasing, block_graph, needing, target_name, writes

WHOLE_VIEWS = ("detach", "alias")   # views of all of a tensor: writing into one writes all of its base
# Views of all of a tensor in another shape, as torch lays it out: reshape and flatten only when
# what they reshape is contiguous (else they copy); a write into one writes all of its base, whose
# new value is the write's reshaped back (C51's m.view(-1).index_add_(0, at, p)).
RESHAPING_VIEWS = ("view", "unsqueeze", "squeeze")
RESHAPING_WHEN_CONTIGUOUS = ("reshape", "flatten", "unflatten")


def family(root) -> set:
    """``root`` and every other name of its memory, however deep: its views, the in-place writes
    into it or into them (a write's output is what it wrote into), and a block's output of its
    write into one of them."""
    names, stack = {root}, [root]
    while stack:
        name = stack.pop()
        for user in name.users:
            more = [user] if (aliasing(user) or writes(user)) and user.args[0] is name else \
                [out for out in user.users if block_alias(out) is name] if user.target is NO_GRAD_HOP else []
            for other in more:
                if other not in names:
                    names.add(other)
                    stack.append(other)
    return names


def block_alias(node):
    """The argument a grad-mode block wrote into in place, when ``node`` is the block's output of
    that write (export has later reads use it), else None."""
    block = node.args[0] if node.op == "call_function" and node.target is operator.getitem else None
    if not isinstance(block, torch.fx.Node) or block.target is not NO_GRAD_HOP:
        return None
    inner = block_graph(block)
    places = [n for n in inner.nodes if n.op == "placeholder"]
    written = written_input(inner.output_node().args[0][node.args[1]], places)
    return None if written is None else block.args[2 + places.index(written)]


def made_from(name):
    """What ``name`` (a view, a write, a block's output of its write) is another name of."""
    return block_alias(name) or name.args[0]


def path_to_base(node) -> list:
    """``node``, then what it writes into or is a view of, down to the tensor that owns the memory."""
    path = [node]
    while isinstance(node, torch.fx.Node) and (writes(node) or aliasing(node)) \
            and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
        path.append(node)
    return path


@dataclass(frozen=True)
class Write:
    """An in-place write as the graph holding it sees it: ``node`` writes into a tensor whose
    memory is ``root``'s: all of it (``root`` itself, its .detach(), .data, a write into it, a
    view of it in another shape) or, through a view, part of it. ``node`` is an aten write, or a grad-mode block writing into one
    of its arguments: then ``place`` is the block's placeholder written into. ``at`` is the aten
    write itself (inside the block for a block), where errors point; ``detach`` the .detach() /
    .data on the way from what is written to ``root``, if any."""
    node: torch.fx.Node
    root: torch.fx.Node
    whole: bool
    at: torch.fx.Node
    place: torch.fx.Node | None = None
    detach: torch.fx.Node | None = None


def writes_in(graph) -> list:
    """Every in-place write in ``graph``, in order: aten writes, and the grad-mode blocks that write
    into what they are given (one per argument, whole only if every write inside is)."""
    bases, found = {}, []   # name -> (root, all of it, detach on the way): one pass, however long the chains
    for node in graph.nodes:
        if writes(node):
            root, whole, detach = base_of(node.args[0], bases)
            found.append(Write(node, root, whole, node, detach=detach))
        elif node.op == "call_function" and node.target is NO_GRAD_HOP:
            found.extend(block_writes(node, bases))
        written = block_alias(node)
        if written is not None:
            bases[node] = base_of(written, bases)
        elif node.op == "call_function" and (writes(node) or aliasing(node)) and isinstance(node.args[0], torch.fx.Node):
            root, whole, detach = base_of(node.args[0], bases)
            name = target_name(node.target)
            bases[node] = (root, whole and (writes(node) or name in WHOLE_VIEWS or reshaping(node)),
                           detach or (node if name == "detach" else None))
    return found


def reshaping(node) -> bool:
    """Is the view ``node`` all of what it views, in another shape?"""
    name = target_name(node.target)
    if name in RESHAPING_VIEWS:
        return node.target._overloadname != "dtype"   # x.view(torch.int32) reads its bits anew
    val = node.args[0].meta.get("val")
    return name in RESHAPING_WHEN_CONTIGUOUS and isinstance(val, torch.Tensor) and val.is_contiguous()


def base_of(node, bases: dict) -> tuple:
    """(root, all of it, detach on the way) for a name ``writes_in`` has seen; a root is its own."""
    return bases.get(node, (node, True, None))


def block_writes(node, bases: dict) -> list:
    """The writes of a grad-mode block into its arguments, one per argument."""
    inner = block_graph(node)
    places = [n for n in inner.nodes if n.op == "placeholder"]
    by_place = {}
    for write in writes_in(inner):
        if write.root in places:
            by_place.setdefault(write.root, []).append(write)
    found = []
    for place, inside in by_place.items():
        arg = node.args[2 + places.index(place)]
        if isinstance(arg, torch.fx.Node):
            root, whole, detach = base_of(arg, bases)
            at = next((w.at for w in inside if not w.whole), inside[-1].at)
            found.append(Write(node, root, whole and all(w.whole for w in inside), at, place, detach))
    return found


@dataclass
class Span:
    """Where a whole write's new value is its root's: from the write up to ``last``, the position
    of the next whole write into the root (which reads it) or the end; ``reads`` are the (name,
    user) pairs of nodes reading the root there, through the root or another name of it."""
    write: Write
    last: int
    reads: list


def spans_of(graph, found: list) -> list:
    """A Span for each whole write in ``found``, in graph order."""
    order = {node: i for i, node in enumerate(graph.nodes)}
    by_root = {}
    for write in found:
        if write.whole:
            by_root.setdefault(write.root, []).append(write)
    spans = []
    for root, writes_into in by_root.items():
        at = [order[w.node] for w in writes_into]
        mine = [Span(w, (at[i + 1] if i + 1 < len(at) else len(order)), []) for i, w in enumerate(writes_into)]
        for name in family(root):
            for user in name.users:
                i = bisect.bisect_left(at, order[user]) - 1   # the last write before the user (or at it)
                if i >= 0 and not (name is writes_into[i].node and chained(user, name)):
                    mine[i].reads.append((name, user))
        spans.extend(mine)
    return sorted(spans, key=lambda span: order[span.write.node])


def live_writes(graph, needed: set, found: list, wanted=()) -> list:
    """The Spans of the whole writes whose new value a needed node reads, or whose root is one of
    ``wanted`` (a block's placeholders read after it) and that write it last; ``needed`` grows
    by what computes them."""
    spans = spans_of(graph, found)
    end = len(graph.nodes)
    readers = {}   # node -> the spans whose new value it reads
    for i, span in enumerate(spans):
        for _, user in span.reads:
            readers.setdefault(user, []).append(i)
    live = {i for i, span in enumerate(spans) if span.write.root in wanted and span.last == end}
    live.update(i for user, read in readers.items() if user in needed for i in read)
    stack = list(live)
    while stack:   # what computes a live write may read a root after an earlier write
        for node in needing(needed, spans[stack.pop()].write.node):
            for i in readers.get(node, ()):
                if i not in live:
                    live.add(i)
                    stack.append(i)
    return [span for i, span in enumerate(spans) if i in live]


def chained(user, name) -> bool:
    """Does ``user`` write on into what the write ``name`` wrote (p.mul_(m).add_(q)), without reading it?
    Then the root needs its new value only after the last of them."""
    return writes(name) and writes(user) and user.args[0] is name and name not in operands(user)


def stale_write(graph, needed: set, found: list):
    """The first write into part of a tensor (through a view) that a needed node reads again
    afterwards through another name (its base, another view): export rewires only the written
    name's later uses to the write, so the other reads see the value from before it. A write
    into all of a tensor is not stale: the translator gives its root the new value."""
    order = {node: i for i, node in enumerate(graph.nodes)}
    last_reads = {}   # root -> (where a needed node last reads it through the name, the name), latest first
    for write in found:
        if write.whole:
            continue
        if write.root not in last_reads:   # once per root, however many writes into its parts
            names = family(write.root)
            last_reads[write.root] = sorted(
                ((max((order[user] for user in name.users if user in needed and user not in names), default=-1),
                  order[name], name) for name in names), key=lambda read: read[:2], reverse=True)
        new = family(write.node)   # what it wrote, and names made of that, are new
        last = next(at for at, _, name in last_reads[write.root] if name not in new)
        if last > order[write.node]:
            return write
    return None


def stale_views(span, needed: set, order: dict) -> list:
    """The other names of a written root made before the write and read in its span, with the
    names they are made from, in graph order: each is made again from the new value."""
    stale, root = set(), span.write.root
    for name, user in span.reads:
        if user in needed and name is not root and order[name] < order[span.write.node]:
            while name is not root and name not in stale:
                stale.add(name)
                name = made_from(name)
    return sorted(stale, key=order.get)


def written_only(node) -> bool:
    """Is ``node`` (a .detach(), a .data) only written into in place, nobody reading what it holds?
    (Written into through a view of all of it in another shape, too.)"""
    stack = [node]
    while stack:
        current = stack.pop()
        for user in current.users:
            if not (writes(user) or aliasing(user) and reshaping(user)) or user.args[0] is not current \
                    or current in operands(user):
                return False
            stack.append(user)
    return True


def cut_only(node, grad: bool) -> bool:
    """Is ``node`` (a .detach(), a .data) read only by in-place writes whose new value is cut where
    the tensor is given it: writes into it, or writes taking it as an operand into a tensor written
    through .detach() or .data (any write in a no_grad block, whose outputs are cut)?"""
    if written_only(node):
        return True
    return all(writes(user) and user.args[0] is not node and (not grad or cut_write(user)) for user in node.users)


def cut_write(node) -> bool:
    """Is ``node`` a write into a .detach() / .data that is only written into?"""
    return any(target_name(n.target) == "detach" and written_only(n) for n in path_to_base(node)[1:])


def operands(node) -> list:
    """The nodes a call reads besides its first argument."""
    found = []
    torch.fx.node.map_arg((node.args[1:], node.kwargs), found.append)
    return found


def written_input(node, places: list):
    """The placeholder that ``node`` is an in-place write chain into (p.clamp_(), p.mul_().add_()), or None."""
    while isinstance(node, torch.fx.Node) and writes(node):
        node = node.args[0]
    return node if node in places else None
