"""`gradflow graph`: the model's entries (one node per call of a module) and their
dependencies as a tree, Graphviz dot or Mermaid. Flowing, partly cut, cut and
gradient-free edges are drawn differently in each; cut edges are labelled with the cut.
On a terminal a tree's label wraps under its guides between its parts (a cut's mark
stays with its place), never inside a word; into a pipe each is one line."""

from __future__ import annotations

import click

from gradflow.analysis.paths import places
from gradflow.cli.escape import shown
from gradflow.cli.render.lines import LOOSE, NO_BREAK, Line, output


def quoted(name: str) -> str:
    return '"' + name.replace('"', r'\"') + '"'


# How each kind of edge (analysis.paths.Edge.kind) is drawn: flowing and cut never look alike.
DOT_STYLE = {"flows": [], "partial": ["color=orange"], "cut": ["style=dashed", "color=red"],
             "none": ["style=dotted"]}
MERMAID_ARROW = {"flows": "-->", "partial": "==>", "cut": "-.->", "none": "-.->"}


def parts(edge, path: str | None = None) -> list:
    """The words of an edge's label in the parts a line may break between: 'partly cut:' when
    some routes still flow, then each cut, 'stop_gradient 12:7' (with the file when it is not
    the model's), all but the last with a comma."""
    if not edge.cuts:
        return []
    cuts = [shown(place) for place in places(edge.cuts, path)]
    return (["partly cut:"] if edge.kind == "partial" else []) + [c + "," for c in cuts[:-1]] + cuts[-1:]


def edge_text(edge, path: str | None = None) -> str:
    """The label of an edge, as dot, Mermaid and (after its mark) the tree say it."""
    return " ".join(parts(edge, path))


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


def label(edge, kinds, repeated: bool, path: str | None, held: bool) -> Line:
    """An entry's label: its name and kind, the cut on its edge marked 'x' (or '~' when partly
    cut) in edge_text's words, '(no gradient)', '(above)' when drawn already; the blanks before
    each part plain, as rich's tree drew them. ``held``, for a terminal: a cut's mark holds to
    its place and '(no gradient)' whole, 'partly cut:' to its first place where they fit a line."""
    word, loose = (NO_BREAK, LOOSE) if held else (" ", " ")
    line = Line(shown(edge.src))
    if edge.src in kinds:
        line.append(" ").append(f"({kinds[edge.src]})", "dim")
    if edge.cuts:
        style, mark = ("red", "x ") if edge.kind == "cut" else ("yellow", "~ ")
        first, *others = parts(edge, path)
        line.append("  ").append((mark + first).replace(" ", word), style)
        for k, part in enumerate(others):
            line.append(loose if k == 0 and edge.kind == "partial" else " ").append(part.replace(" ", word), style)
    elif edge.kind == "none":
        line.append("  ").append(f"(no{word}gradient)", "dim")
    if repeated:
        line.append(" ").append("(above)", "dim")
    return line


def rows(root: str, inputs_of: dict, kinds, path: str | None, guides: tuple, held: bool):
    """(a line: its guides and label, the guides of its continuations, as wide as those) for the
    root (a loss) and what it depends on, depth first in the order the model uses it; an entry
    already drawn is marked (above), not expanded again."""
    space, down, fork, end = guides
    yield Line().append(shown(root), "bold").append(" ").append("(loss)"), ""
    seen, stack = {root}, [(inputs_of.get(root, []), 0, "")]
    while stack:
        children, k, indent = stack.pop()
        if k == len(children):
            continue
        stack.append((children, k + 1, indent))
        e, last = children[k], k == len(children) - 1
        below = indent + (space if last else down)
        yield Line(indent + (end if last else fork)).append(label(e, kinds, e.src in seen, path, held)), below
        if e.src not in seen:
            seen.add(e.src)
            stack.append((inputs_of.get(e.src, []), 0, below))


def tree(entries, edges, kinds, roots, no_color: bool, path: str | None = None) -> None:
    """For each root (a loss), what it depends on (see rows); on a terminal a label longer than
    its line wraps under its guides, between its parts (see label and between_words)."""
    inputs_of: dict[str, list] = {}
    for e in edges:
        inputs_of.setdefault(e.dst, []).append(e)
    out = output(no_color)
    guides = GUIDES[(getattr(out.file, "encoding", None) or "utf-8").lower().startswith("utf")]
    held = out.is_terminal
    if held:
        from gradflow.cli.render.console import between_words
    for root in roots:
        for line, rest in rows(root, inputs_of, kinds, path, guides, held):
            out.print(between_words(line.rich(), out.width, rest) if held else line, soft_wrap=True)


def render(fmt, entries, edges, kinds, roots, no_color: bool, path: str | None = None) -> None:
    """``path``: the model file; cuts located in it are labelled line:col, others FILE:LINE:COL."""
    if fmt == "tree":
        tree(entries, edges, kinds, roots, no_color, path)
    else:
        click.echo(dot(entries, edges, kinds, path) if fmt == "dot" else mermaid(entries, edges, kinds, path))
