"""`gradflow gradcheck`: one row per (loss, parameter), the worst disagreement found."""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from gradflow.cli.render.console import console, emit


def render(checks, no_color: bool) -> None:
    out = console(no_color)
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in ("loss", "parameter", "entries", "max |error|", "tape", "numeric", "result"):
        t.add_column(column, no_wrap=column in ("loss", "parameter"),   # names stay whole
                     justify="right" if column in ("entries",) else "left")
    for c in checks:
        if c.skipped:
            t.add_row(c.loss, c.param, "0", "-", "-", "-", Text(f"skipped: {c.skipped.split()[0]}", style="dim"))
            continue
        verdict = Text("ok", style="green") if c.ok else Text(f"FAIL at {list(c.worst)}", style="bold red")
        t.add_row(c.loss, c.param, str(c.entries), f"{c.max_abs_error:.2g}", f"{c.tape:.4g}",
                  f"{c.numeric:.4g}", verdict)
    emit(out, t)
    reasons = sorted({c.skipped for c in checks if c.skipped})
    for reason in reasons:
        out.print(f"skipped: {reason}", style="dim")
    out.print(summary(checks), style="green" if passed(checks) else "bold red")


def passed(checks) -> bool:
    """Every compared pair agrees, and at least one pair was compared: a run that
    skipped everything checked nothing and does not pass."""
    return all(c.ok for c in checks) and any(not c.skipped for c in checks)


def summary(checks) -> str:
    compared = [c for c in checks if not c.skipped]
    skipped, failed = len(checks) - len(compared), sum(not c.ok for c in compared)
    text = f"{len(compared)} pair{'s' if len(compared) != 1 else ''} compared"
    if skipped:
        text += f", {skipped} skipped"
    if not compared:
        return text + ": nothing was compared, so nothing is verified"
    return text + (": ok" if not failed else f": {failed} failed")
