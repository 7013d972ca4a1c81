"""`gradflow graph`: the model's entries (one node per call of a module) and their
dependencies as a tree, Graphviz dot or Mermaid. Flowing, partly cut, cut and
gradient-free edges are drawn differently in each; cut edges are labelled with the cut."""

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


def tree_line(edge, kinds, repeated: bool, path: str | None = None) -> str:
    from rich.markup import escape
    kind = f" [dim]({kinds[edge.src]})[/dim]" if edge.src in kinds else ""
    note = {"cut": f"  [red]x {escape(label(edge, path))}[/red]",
            "partial": f"  [yellow]~ {escape(edge_text(edge, path))}[/yellow]",
            "none": "  [dim](no gradient)[/dim]"}.get(edge.kind, "")
    return f"{edge.src}{kind}{note}" + (" [dim](above)[/dim]" if repeated else "")


def tree(entries, edges, kinds, roots, no_color: bool, path: str | None = None) -> None:
    """For each root (a loss), what it depends on, depth first in the order the model
    uses it; an entry already drawn is marked (above), not expanded again."""
    from rich.tree import Tree

    from gradflow.cli.render.console import console
    inputs_of: dict[str, list] = {}
    for e in edges:
        inputs_of.setdefault(e.dst, []).append(e)
    out = console(no_color)
    for root in roots:
        top = Tree(f"[bold]{root}[/bold] (loss)")
        seen, stack = {root}, [(top, iter(inputs_of.get(root, ())))]
        while stack:
            branch, pending = stack[-1]
            e = next(pending, None)
            if e is None:
                stack.pop()
                continue
            child = branch.add(tree_line(e, kinds, e.src in seen, path))
            if e.src not in seen:
                seen.add(e.src)
                stack.append((child, iter(inputs_of.get(e.src, ()))))
        out.print(top)


def render(fmt, entries, edges, kinds, roots, no_color: bool, path: str | None = None) -> None:
    """``path``: the model file; cuts located in it are labelled line:col, others FILE:LINE:COL."""
    if fmt == "tree":
        tree(entries, edges, kinds, roots, no_color, path)
    else:
        click.echo(dot(entries, edges, kinds, path) if fmt == "dot" else mermaid(entries, edges, kinds, path))
