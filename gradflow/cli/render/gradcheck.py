"""`gradflow gradcheck`: one row per (loss, parameter), the worst disagreement found; a
terminal too narrow for the table of even the fewest columns gets a record per row."""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from gradflow.cli.render.console import as_records, console, emit, widths


COLUMNS = ("loss", "parameter", "entries", "max |error|", "tape", "numeric", "result")
# The layouts a terminal gets, the first that fits (else the last): every column; without the
# two values whose gap the error column already gives; without the count; with a skipped pair's
# reason left to the lines below the table. Numbers are never cut to "1.6e…".
LAYOUTS = (
    (COLUMNS, True),
    (("loss", "parameter", "entries", "max |error|", "result"), True),
    (("loss", "parameter", "max |error|", "result"), True),
    (("loss", "parameter", "max |error|", "result"), False),
)


def render(checks, no_color: bool) -> None:
    out = console(no_color)
    # measured for a terminal only: a pipe gets every column, whole lines
    t = fitted(out, checks) if out.is_terminal else table(COLUMNS, [cells(c) for c in checks])
    if t is None:   # a long name and the error cannot share a line
        for line in records(checks, out.width):
            out.print(line)
    else:
        emit(out, t)
    reasons = sorted({c.skipped for c in checks if c.skipped})
    for reason in reasons:
        out.print(f"skipped: {reason}", style="dim")
    out.print(summary(checks), style="green" if passed(checks) else "bold red")


def fitted(out, checks) -> Table | None:
    """The table of the first of LAYOUTS that fits the terminal unwrapped, else of the last with
    its cells wrapped between words; None when even that is wider than the terminal."""
    for columns, why in LAYOUTS:
        t = table(columns, [cells(c, why) for c in checks])
        measured = widths(out, t)
        if measured.maximum <= out.width:
            return t
    return t if measured.minimum <= out.width else None


def table(columns, rows: list) -> Table:
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in columns:
        # Names stay whole; the other cells wrap between words only ("max" over "|error|").
        t.add_column(column, no_wrap=column in ("loss", "parameter"), overflow="fold",
                     justify="right" if column == "entries" else "left")
    for row in rows:
        t.add_row(*(row[COLUMNS.index(column)] for column in columns))
    return t


def records(checks, width: int) -> list:
    """The table as a record per row (see as_records): the parameter, then a line per other column."""
    rows = [dict(zip(COLUMNS, cells(c, why=False))) for c in checks]   # a skipped pair's reason is said below
    names = [name for name in COLUMNS if name != "parameter"]
    return as_records([(Text(row["parameter"]), [row[name] for name in names]) for row in rows], names, width)


def cells(c, why: bool = True) -> tuple:
    """One check's cells, in COLUMNS order; a skipped pair's with the first word of why."""
    if c.skipped:
        text = f"skipped: {c.skipped.split()[0]}" if why else "skipped"
        return c.loss, c.param, "0", "-", "-", "-", Text(text, style="dim")
    verdict = Text("ok", style="green") if c.ok else Text(f"FAIL at {list(c.worst)}", style="bold red")
    return (c.loss, c.param, str(c.entries), f"{c.max_abs_error:.2g}", f"{c.tape:.4g}",
            f"{c.numeric:.4g}", verdict)


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
