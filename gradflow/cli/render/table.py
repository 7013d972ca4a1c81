"""`analyze --format table`: parameters x losses, status and norm in each cell; the
reasons (cuts, where a zero gradient dies) as numbered notes under the table.
Partial cuts of flowing pairs are left to the JSON and markdown reports: in a
table they bury the answer to "why does this get nothing?"."""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from gradflow.cli.escape import shown
from gradflow.cli.render.console import console

STYLE = {"flows": "green", "zero": "yellow", "blocked": "red", "unreachable": "dim",
         "error": "bold red", "warning": "yellow"}


def number(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def place(c, path: str | None = None) -> str:
    return f"{c.op} in {c.node} ({c.where(path)})"


class Notes:
    """Numbered notes, one per distinct reason, so cells stay narrow."""

    def __init__(self, path: str | None = None):
        self.texts: dict[str, int] = {}
        self.path = path              # the model file: its places are shown as lines

    def mark(self, text: str) -> str:
        number_ = self.texts.setdefault(text, len(self.texts) + 1)
        return f"[{number_}]"


def cell(pair, notes: Notes) -> Text:
    words = pair.status
    if pair.status == "flows" and pair.norm is not None:
        words += f" {number(pair.norm)}"
    if pair.status == "blocked":
        words += " " + notes.mark("blocked by " + ", ".join(place(c, notes.path) for c in pair.cut_by))
    elif pair.status == "zero" and pair.dies_at:
        words += " " + notes.mark("gradient dies at " + ", ".join(place(c, notes.path) for c in pair.dies_at))
    if pair.nonfinite:
        words += f" ({pair.nonfinite} non-finite)"
    return Text(words, style=STYLE[pair.status])


def header(report) -> Text:
    m = report.model
    text = Text()
    text.append(shown(m["name"]), style="bold")
    text.append(shown(f"  {m['path']}") + "\n", style="dim")
    if m.get("description"):
        text.append(shown(m["description"]) + "\n", style="italic")
    mode = "structural (no numbers)" if m["mode"] == "structural" else f"numeric, seed {m['seed']}"
    text.append(f"{mode}; {m['params']} parameters, {m['param_count']:,} values; {m['nodes']} nodes")
    return text


def shape_text(p) -> str:
    return "[" + ", ".join(map(str, p.shape)) + "]"


def table(report, losses: list, notes: Notes) -> Table:
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    t.add_column("parameter", overflow="fold")
    t.add_column("shape", overflow="fold")
    for loss in losses:
        t.add_column(loss.name, overflow="fold")
    if report.model["mode"] == "numeric":
        t.add_row(Text("loss value", style="dim"), "", *(Text(number(l.value), style="dim") for l in losses),
                  end_section=True)
    for p in report.params:
        t.add_row(p.name, shape_text(p), *(cell(p.grads[loss.name], notes) for loss in losses))
    return t


def loss_groups(report, width: int) -> list:
    """The losses in groups whose columns fit ``width`` beside the parameter and shape
    columns, so a narrow terminal gets several tables rather than broken words."""
    fixed = max(len("parameter"), *(len(p.name) for p in report.params)) + 2 + max(
        len("shape"), *(len(shape_text(p)) for p in report.params)) + 2
    groups, current, used = [], [], fixed
    for loss in report.losses:
        cells = [cell(p.grads[loss.name], Notes(report.model["path"])).plain for p in report.params]
        need = max(len(loss.name), len(number(loss.value)), *(len(c) for c in cells)) + 2
        if current and used + need > width:
            groups.append(current)
            current, used = [], fixed
        current.append(loss)
        used += need
    return groups + [current]


def render_report(report, no_color: bool) -> None:
    out = console(no_color)
    out.print(header(report))
    notes = Notes(report.model["path"])
    for k, losses in enumerate(loss_groups(report, out.width)):
        if k:
            out.print()
        out.print(table(report, losses, notes))
    for text, n in notes.texts.items():
        out.print(shown(f"[{n}] {text}"), highlight=False, markup=False)
    if report.findings:
        out.print()
    for f in report.findings:
        line = Text(shown(f"{f.file or f.path}:{f.line}:{f.col}: "))
        line.append(f.severity, style=STYLE[f.severity])
        line.append(shown(f": {f.message} [{f.rule}]"))
        if f.command:
            line.append(shown(f" see: {f.command}"), style="dim")
        out.print(line)
