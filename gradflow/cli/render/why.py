"""`gradflow why`: every path from a parameter to a loss, cut points marked."""

from __future__ import annotations

from rich.text import Text

from gradflow.analysis.paths import places
from gradflow.cli.escape import shown
from gradflow.cli.render.console import NO_BREAK, console
from gradflow.cli.render.table import STYLE


def render(param: str, results, no_color: bool, model_path: str | None = None, frozen: bool = False) -> None:
    """``results``: [(loss, Pair, [Path], how many paths were left out)] for each loss asked about;
    ``model_path``: the model file, whose places are shown as line:col (others as FILE:LINE:COL)."""
    out = console(no_color)
    for index, (loss, pair, found, more) in enumerate(results):
        if index:
            out.print()   # a blank line between losses, none after the last
        head = Text(f"{param} ")
        if frozen:   # what reaches it trains nothing: no optimizer updates it
            head.append("(frozen) ", style="dim")
        head.append(f"-> {loss}: ")
        head.append(pair.status, style=STYLE[pair.status])
        if pair.norm is not None and pair.status == "flows":
            head.append(f" (norm {pair.norm:.3g})")
        out.print(head)
        for place in pair.dies_at:
            out.print(f"  the gradient dies at {place.op} in {place.node} ({shown(place.where(model_path))})",
                      style="yellow", markup=False)
        if not found:
            out.print("  no path: the loss does not depend on this parameter", style="dim")
        for number, path in enumerate(found, 1):
            line = Text(f"  {number}. ")
            room = out.width - len(line) if out.is_terminal else None   # beside the number, as lines wrap
            for k, step in enumerate(path.steps):
                if k:
                    line.append(" -> ")
                line.append(step.entry, style="bold" if k in (0, len(path.steps) - 1) else "")
                marks = [shown(f"[x {place}]") for place in places(step.cuts, model_path, step.entry)]
                for mark in glued(step.entry, marks, room):
                    line.append(mark, style="red")
            out.print(line)
        if more:
            out.print(f"  ... {more:,} more path{'s' if more > 1 else ''} not shown (raise --limit)", style="dim")


def glued(entry: str, marks: list, room: int | None) -> list:
    """Each cut's mark with the space before it. On a terminal (``room``: the columns of a
    wrapped line) no-break spaces keep an entry and its marks on one line where they fit one,
    else each mark whole where it fits one: a line is wider than the terminal only for a word."""
    if room is None:
        return [" " + mark for mark in marks]
    from rich.cells import cell_len
    if cell_len(entry + "".join(" " + mark for mark in marks)) <= room:
        return [NO_BREAK + mark.replace(" ", NO_BREAK) for mark in marks]
    return [" " + (mark.replace(" ", NO_BREAK) if cell_len(mark) <= room else mark) for mark in marks]
