"""`gradflow why`: every path from a parameter to a loss, cut points marked."""

from __future__ import annotations

from rich.text import Text

from gradflow.analysis.paths import places
from gradflow.cli.escape import shown
from gradflow.cli.render.console import console
from gradflow.cli.render.lines import LOOSE, NO_BREAK
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
            out.print(f"  the gradient dies at {shown(place.said(model_path))}",
                      style="yellow", markup=False)
        if pair.status == "zero" and not pair.dies_at:
            out.print("  the paths' gradients are not zero, but cancel each other out in the parameter",
                      style="yellow")
        if not found:
            out.print("  no path: the loss does not depend on this parameter", style="dim")
        for number, path in enumerate(found, 1):
            line = Text(f"  {number}. ")
            for k, step in enumerate(path.steps):
                if k:
                    line.append(" -> ")
                line.append(step.entry, style="bold" if k in (0, len(path.steps) - 1) else "")
                for place in places(step.cuts, model_path, step.entry):
                    mark = shown(f"[x {place}]")   # on a terminal held whole, and to its entry (see between_words)
                    line.append(LOOSE + mark.replace(" ", NO_BREAK) if out.is_terminal else " " + mark, style="red")
            out.print(line)
        if more:
            out.print(f"  ... {more:,} more path{'s' if more > 1 else ''} not shown (raise --limit)", style="dim")

