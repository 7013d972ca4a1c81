"""`gradflow graph`: the model's entries and their dependencies as a tree, Graphviz dot or
Mermaid. Edges that carry no gradient are dashed and labelled with the cut."""

from __future__ import annotations

import click


def label(edge) -> str:
    return ", ".join(f"{c.op} {c.line}:{c.col}" for c in edge.cuts)


def quoted(name: str) -> str:
    return '"' + name.replace('"', r'\"') + '"'


def dot(entries, edges, kinds) -> str:
    lines = ["digraph gradflow {", "  rankdir=LR;", "  node [shape=box, fontname=Helvetica];"]
    shapes = {"param": "ellipse", "input": "note"}
    for name in entries:
        lines.append(f"  {quoted(name)} [shape={shapes.get(kinds.get(name), 'box')}];")
    for e in edges:
        attrs = [] if e.carries else (["style=dashed", "color=red"] if e.cuts else ["style=dotted"])
        if e.cuts:
            attrs.append(f"label={quoted(label(e))}")
        lines.append(f"  {quoted(e.src)} -> {quoted(e.dst)}" + (f" [{', '.join(attrs)}]" if attrs else "") + ";")
    lines.append("}")
    return "\n".join(lines)


def mermaid(entries, edges, kinds) -> str:
    ids = {name: f"n{i}" for i, name in enumerate(entries)}
    lines = ["flowchart LR"]
    for name in entries:
        shape = ("([", "])") if kinds.get(name) == "param" else (("[/", "/]") if kinds.get(name) == "input" else ("[", "]"))
        lines.append(f'  {ids[name]}{shape[0]}"{name}"{shape[1]}')
    for e in edges:
        arrow = "-->" if e.carries else "-.->"
        text = f"|{label(e)}|" if e.cuts else ""
        lines.append(f"  {ids[e.src]} {arrow}{text} {ids[e.dst]}")
    return "\n".join(lines)


def tree(entries, edges, kinds, roots, no_color: bool) -> None:
    """For each root (a loss), what it depends on, depth first; a repeated entry is not expanded again."""
    from rich.tree import Tree

    from gradflow.cli.render.console import console
    inputs_of: dict[str, list] = {}
    for e in edges:
        inputs_of.setdefault(e.dst, []).append(e)
    out = console(no_color)
    for root in roots:
        top = Tree(f"[bold]{root}[/bold] (loss)")
        seen, stack = {root}, [(top, root)]
        while stack:
            branch, name = stack.pop()
            for e in reversed(inputs_of.get(name, [])):
                note = f"  [red]x {label(e)}[/red]" if e.cuts else ""
                kind = f" [dim]({kinds[e.src]})[/dim]" if e.src in kinds else ""
                child = branch.add(f"{e.src}{kind}{note}" + (" [dim](above)[/dim]" if e.src in seen else ""))
                if e.src not in seen:
                    seen.add(e.src)
                    stack.append((child, e.src))
        out.print(top)


def render(fmt, entries, edges, kinds, roots, no_color: bool) -> None:
    if fmt == "tree":
        tree(entries, edges, kinds, roots, no_color)
    else:
        click.echo(dot(entries, edges, kinds) if fmt == "dot" else mermaid(entries, edges, kinds))
