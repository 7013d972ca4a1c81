"""`gradflow ops`: the op table, built from the engine's OPS."""

from __future__ import annotations

from rich import box
from rich.table import Table

from gradflow.engine import ALIASES, OPS


def gradient(op) -> str:
    """What passes backward: 'all', 'none: stop', 'none: cut' or 'not through idx'."""
    if op.kind == "stop":
        return "none: stop"
    if op.kind == "implicit":
        return "none: cut"
    rules = op.vjps_for(len(op.inputs))
    cut = [name for name, rule in zip(op.inputs, rules) if rule is None]
    return "all" if not cut else "not " + ", ".join(cut)


def render(out) -> None:
    aliases = {target: alias for alias, target in ALIASES.items()}
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    t.add_column("op", no_wrap=True)
    t.add_column("gradient", no_wrap=True)
    t.add_column("description", ratio=1)
    groups: dict[str, list] = {}
    for op in OPS.values():
        groups.setdefault(op.group, []).append(op)
    for group, ops in groups.items():
        t.add_row(f"[bold]{group}[/bold]", "", "")
        for op in ops:
            doc = op.doc + (f" (alias: {aliases[op.name]})" if op.name in aliases else "")
            t.add_row(f"  {op.name}{op.signature}", gradient(op), doc)
        t.add_section()
    out.print(t)
