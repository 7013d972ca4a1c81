"""`gradflow graph`: the model's entries (one node per call of a module) and their
dependencies as a tree, Graphviz dot or Mermaid. Flowing, partly cut, cut and
gradient-free edges are drawn differently in each; cut edges are labelled with the cut.
On a terminal a tree's label wraps under its guides between its parts (a cut's mark
stays with its place), never inside a word; into a pipe each is one line."""

from __future__ import annotations

import click

from gradflow.analysis.paths import places
from gradflow.cli.escape import shown


def label(edge, path: str | None = None) -> str:
    """The cuts on an edge: 'stop_gradient 12:7', or with the file when it is not the model's."""
    return shown(", ".join(places(edge.cuts, path)))


def quoted(name: str) -> str:
    return '"' + name.replace('"', r'\"') + '"'


# How each kind of edge (analysis.paths.Edge.kind) is drawn: flowing and cut never look alike.
DOT_STYLE = {"flows": [], "partial": ["color=orange"], "cut": ["style=dashed", "color=red"],
             "none": ["style=dotted"]}
MERMAID_ARROW = {"flows": "-->", "partial": "==>", "cut": "-.->", "none": "-.->"}


def edge_text(edge, path: str | None = None) -> str:
    """The label of an edge: its cuts, and for a partly cut edge that some routes still flow."""
    if not edge.cuts:
        return ""
    return ("partly cut: " if edge.kind == "partial" else "") + label(edge, path)


def dot(entries, edges, kinds, path: str | None = None) -> str:
    lines = ["digraph gradflow {", "  rankdir=LR;", "  node [shape=box, fontname=Helvetica];"]
    shapes = {"param": "ellipse", "input": "note"}
    for name in entries:
        lines.append(f"  {quoted(name)} [shape={shapes.get(kinds.get(name), 'box')}];")
    for e in edges:
        attrs = list(DOT_STYLE[e.kind]) + ([f"label={quoted(edge_text(e, path))}"] if e.cuts else [])
        lines.append(f"  {quoted(e.src)} -> {quoted(e.dst)}" + (f" [{', '.join(attrs)}]" if attrs else "") + ";")
    lines.append("}")
    return "\n".join(lines)


def mermaid(entries, edges, kinds, path: str | None = None) -> str:
    ids = {name: f"n{i}" for i, name in enumerate(entries)}
    lines = ["flowchart LR"]
    for name in entries:
        shape = ("([", "])") if kinds.get(name) == "param" else (("[/", "/]") if kinds.get(name) == "input" else ("[", "]"))
        lines.append(f'  {ids[name]}{shape[0]}"{name}"{shape[1]}')
    for e in edges:
        text = f"|{edge_text(e, path)}|" if e.cuts else ""
        lines.append(f"  {ids[e.src]} {MERMAID_ARROW[e.kind]}{text} {ids[e.dst]}")
    return "\n".join(lines)


# Rich's tree guides (rich.tree.Tree): unicode, or ASCII for a stream that cannot spell them.
GUIDES = {True: ("    ", "│   ", "├── ", "└── "), False: ("    ", "|   ", "+-- ", "`-- ")}


def units(edge, kinds, repeated: bool, path: str | None = None) -> list:
    """The label of an edge's source as units, each a list of (separator, text, style)
    pieces: a line breaks between units, inside one only when it cannot fit a line alone,
    so a cut's mark stays with its place ('x stop_gradient 12:7') and '(no gradient)' whole."""
    out = [[("", shown(edge.src), "")]]
    if edge.src in kinds:
        out.append([(" ", f"({kinds[edge.src]})", "dim")])
    if edge.kind in ("cut", "partial"):
        style, mark = ("red", "x") if edge.kind == "cut" else ("yellow", "~ partly cut:")
        cuts = [shown(p) for p in places(edge.cuts, path)]
        cuts = [c + ("," if k < len(cuts) - 1 else "") for k, c in enumerate(cuts)]
        head = [("  ", f"{mark} {cuts[0]}", style)] if edge.kind == "cut" \
            else [("  ", mark, style), (" ", cuts[0], style)]
        out += [head] + [[(" ", c, style)] for c in cuts[1:]]
    elif edge.kind == "none":
        out.append([("  ", "(no gradient)", "dim")])
    if repeated:
        out.append([(" ", "(above)", "dim")])
    return out


def rows(root: str, inputs_of: dict, kinds, path: str | None, guides: tuple):
    """(guides of a label's first line, of its other lines, as wide as those, its units) for
    the root (a loss) and what it depends on, depth first in the order the model uses it; an
    entry already drawn is marked (above), not expanded again."""
    space, down, fork, end = guides
    yield "", "", [[("", shown(root), "bold")], [(" ", "(loss)", "")]]
    seen, stack = {root}, [(inputs_of.get(root, []), 0, "")]
    while stack:
        children, k, indent = stack.pop()
        if k == len(children):
            continue
        stack.append((children, k + 1, indent))
        e, last = children[k], k == len(children) - 1
        below = indent + (space if last else down)
        yield indent + (end if last else fork), below, units(e, kinds, e.src in seen, path)
        if e.src not in seen:
            seen.add(e.src)
            stack.append((inputs_of.get(e.src, []), 0, below))


def wrapped(label: list, width: int | None, guides: int) -> list:
    """A label's (separator, text, style) pieces in lines no wider than ``width`` (None: one
    line) where a line can hold them, ``guides`` columns on each taken by the tree's guides:
    broken between units, inside a unit only when it cannot fit a line alone, never inside a
    word (a longer word gets a line of its own, whole, as a name longer than the terminal)."""
    if width is None or guides >= width:   # a pipe, or guides as wide as the terminal: no room to wrap in
        return [[piece for unit in label for piece in unit]]
    from rich.cells import cell_len
    lines, used = [[]], guides

    def put(sep: str, text: str, style: str) -> None:
        nonlocal used
        if lines[-1] and used + cell_len(sep + text) > width:
            lines.append([])
            used, sep = guides, ""
        lines[-1].append((sep, text, style))
        used += cell_len(sep + text)

    for unit in label:
        length = cell_len("".join(sep + text for sep, text, _ in unit))
        alone = length - cell_len(unit[0][0])   # on a line of its own, without its separator
        if used + length <= width:
            lines[-1] += unit
            used += length
        elif lines[-1] and guides + alone <= width:
            lines.append([("", *unit[0][1:]), *unit[1:]])
            used = guides + alone
        else:
            for sep, text, style in unit:
                for k, word in enumerate([text] if guides + cell_len(text) <= width else text.split(" ")):
                    put(sep if k == 0 else " ", word, style)
    return lines


def tree(entries, edges, kinds, roots, no_color: bool, path: str | None = None) -> None:
    """For each root (a loss), what it depends on (see rows); on a terminal, a label longer
    than its line wraps under its guides, between units (see wrapped)."""
    from gradflow.cli.render.lines import Line, output
    inputs_of: dict[str, list] = {}
    for e in edges:
        inputs_of.setdefault(e.dst, []).append(e)
    out = output(no_color)
    width = out.width if out.is_terminal else None
    guides = GUIDES[(getattr(out.file, "encoding", None) or "utf-8").lower().startswith("utf")]
    for root in roots:
        for first, rest, label in rows(root, inputs_of, kinds, path, guides):
            for k, pieces in enumerate(wrapped(label, width, len(rest))):
                line = Line(rest if k else first)
                for sep, text, style in pieces:
                    line.append(sep).append(text, style)
                out.print(line, soft_wrap=True)


def render(fmt, entries, edges, kinds, roots, no_color: bool, path: str | None = None) -> None:
    """``path``: the model file; cuts located in it are labelled line:col, others FILE:LINE:COL."""
    if fmt == "tree":
        tree(entries, edges, kinds, roots, no_color, path)
    else:
        click.echo(dot(entries, edges, kinds, path) if fmt == "dot" else mermaid(entries, edges, kinds, path))
