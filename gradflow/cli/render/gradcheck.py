"""`gradflow gradcheck`: one row per (loss, parameter), the worst disagreement found."""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from gradflow.cli.render.console import console


def render(checks, no_color: bool) -> None:
    out = console(no_color)
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in ("loss", "parameter", "entries", "max |error|", "tape", "numeric", "result"):
        t.add_column(column, overflow="fold", justify="right" if column in ("entries",) else "left")
    for c in checks:
        if c.skipped:
            t.add_row(c.loss, c.param, "0", "-", "-", "-", Text(f"skipped: {c.skipped}", style="dim"))
            continue
        verdict = Text("ok", style="green") if c.ok else Text(f"FAIL at {list(c.worst)}", style="bold red")
        t.add_row(c.loss, c.param, str(c.entries), f"{c.max_abs_error:.2g}", f"{c.tape:.4g}",
                  f"{c.numeric:.4g}", verdict)
    out.print(t)
    failed = sum(not c.ok for c in checks)
    out.print(Text(f"{len(checks)} pairs checked: " + ("ok" if not failed else f"{failed} failed"),
                   style="green" if not failed else "bold red"))
