"""`gradflow ops`: the op table, built from the engine's OPS."""

from __future__ import annotations

from rich import box
from rich.table import Table

from gradflow.engine import ALIASES, OPS
from gradflow.engine.ops import REQUIRED


def signature(op) -> str:
    inputs = ["[xs]"] if op.variadic else list(op.inputs)
    attrs = [k if v is REQUIRED else f"{k}={v!r}" for k, v in op.attrs.items()]
    return f"{op.name}({', '.join(inputs + attrs)})"


def gradient(op) -> str:
    if op.kind == "stop":
        return "none (explicit stop)"
    if op.kind == "implicit":
        return "none (implicit cut)"
    rules = op.vjps_for(len(op.inputs))
    cut = [name for name, rule in zip(op.inputs, rules) if rule is None]
    return "all inputs" if not cut else "not through " + ", ".join(cut)


def render(out) -> None:
    aliases = {target: alias for alias, target in ALIASES.items()}
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in ("group", "op", "gradient", "description"):
        t.add_column(column, overflow="fold")
    for op in sorted(OPS.values(), key=lambda o: o.group):
        doc = op.doc + (f" (alias: {aliases[op.name]})" if op.name in aliases else "")
        t.add_row(op.group, signature(op), gradient(op), doc)
    out.print(t)
