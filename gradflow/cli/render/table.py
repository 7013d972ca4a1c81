"""`analyze --format table`: parameters x losses, each cell a status and the gradient's L2
norm; the reasons (cuts, partial cuts, where a zero gradient dies) as numbered notes
under the table; the findings; and a last line with the verdict.

Blocks the model asks for (asserted in expect:, outside a loss's wrt, a frozen
parameter, or one another loss trains) are shown dim, not in alarm red. Repeated
instances whose cells agree are one row (`block.{0..95}.w`) unless --expand.
A pair that is not as intended is marked `!`; --problems keeps only the rows with
one. Names are never split: a narrow terminal gets several tables, one too narrow for a
table of even one loss beside the names a record per parameter, a pipe whole lines.
"""

from __future__ import annotations

import re

from rich import box
from rich.table import Table
from rich.text import Text

from gradflow.analysis.flow import told
from gradflow.cli.escape import shown
from gradflow.cli.render.console import as_records, console, emit, widths
from gradflow.cli.render.text import finding_line, plural, verdict

STYLE = {"flows": "green", "zero": "yellow", "blocked": "red", "unreachable": "red"}
PROBLEM = "!"   # the mark of a cell not as intended
SEGMENT = re.compile(r"(?<=\.)[0-9]+(?=\.|$)")


def number(x) -> str:
    return "-" if x is None else f"{x:.3g}"


class Notes:
    """Numbered notes, one per distinct reason, so cells stay narrow."""

    def __init__(self, path: str | None = None):
        self.texts: dict[str, int] = {}
        self.path = path              # the model file: its places are shown as lines

    def mark(self, text: str) -> str:
        number_ = self.texts.setdefault(text, len(self.texts) + 1)
        return f"[{number_}]"


def words(pair, notes: Notes) -> str:
    """A cell's text without its norm: the status and its notes."""
    text = pair.status
    if pair.status == "blocked":
        text += " " + notes.mark("blocked by " + "; ".join(told(pair.cut_by, notes.path)))
    elif pair.status == "zero" and pair.dies_at:
        text += " " + notes.mark("gradient dies at " + "; ".join(told(pair.dies_at, notes.path)))
    if pair.status in ("flows", "zero") and pair.partly_told:   # some paths are cut, the others not
        others = "flow" if pair.status == "flows" else "carry a zero gradient"
        text += " ~" + notes.mark(f"partly cut (other paths {others}) by "
                                  + "; ".join(told(pair.partly_told, notes.path)))
    if pair.nonfinite:
        text += f" ({pair.nonfinite} non-finite)"
    return text


def cell(pairs: list, intent: str, notes: Notes) -> Text:
    """One cell for one or several (collapsed) pairs that agree on status and notes."""
    text = words(pairs[0], notes)
    norms = [p.norm for p in pairs if p.status == "flows" and p.norm is not None]
    if norms:
        low, high = min(norms), max(norms)
        spread = number(low) if number(low) == number(high) else f"{number(low)}..{number(high)}"
        text = text.replace("flows", f"flows {spread}", 1)
    if intent == "intended":   # a cut by design says so; no path at all needs no word
        return Text(text + (" (intended)" if pairs[0].status == "blocked" else ""), style="dim")
    if intent == "problem":   # marked in words too: a pipe has no red, and not every eye sees it
        # a leak (flows where it should not) is as alarming as a block: not the green of health
        return Text(text + " " + PROBLEM, style="red" if pairs[0].status == "flows" else STYLE[pairs[0].status])
    return Text(text, style=STYLE[pairs[0].status] if pairs[0].status == "flows" else "")


def rows(report, notes: Notes, expand: bool, problems: bool) -> list:
    """(name, shape, [cell per loss]) rows; repeated instances that agree become one row."""
    losses = [l.name for l in report.losses]
    groups: dict = {}
    reasons = Notes(notes.path)   # one numbering for every row: rows agree when their notes do
    for p in report.params:
        intents = tuple(report.intent(p.name, loss) for loss in losses)
        if problems and "problem" not in intents:
            continue
        signature = (tuple(p.shape), intents, tuple(words(p.grads[l], reasons) for l in losses), p.frozen)
        match = SEGMENT.search(p.name)
        key = (p.name[:match.start()], p.name[match.end():], signature) if match and not expand else p.name
        groups.setdefault(key, []).append(p)
    out = []
    for key, members in groups.items():
        names = [p.name for p in members]
        if len(members) > 1 and collapsible(names):
            first, last = SEGMENT.search(names[0]).group(), SEGMENT.search(names[-1]).group()
            name = f"{key[0]}{{{first}..{last}}}{key[1]}"
            out.append((name, members, key[2][1]))
        else:
            out += [(p.name, [p], tuple(report.intent(p.name, l) for l in losses)) for p in members]
    out.sort(key=lambda row: report.params.index(row[1][0]))
    return [(name_cell(name, members[0].frozen), shape_text(members[0]),
             [cell([m.grads[l] for m in members], intent, notes) for l, intent in zip(losses, intents)])
            for name, members, intents in out]


def name_cell(name: str, frozen: bool) -> Text:
    """A parameter's name, and whether it is frozen: its gradient then trains nothing."""
    text = Text(shown(name))
    if frozen:
        text.append(" (frozen)", style="dim")
    return text


def collapsible(names: list) -> bool:
    """Consecutive instance numbers, in order: block.0 ... block.95."""
    numbers = [int(SEGMENT.search(n).group()) for n in names]
    return numbers == list(range(numbers[0], numbers[0] + len(numbers)))


def header(report) -> Text:
    m = report.model
    text = Text()
    text.append(shown(m["name"]), style="bold")
    text.append(shown(f"  {m['path']}") + "\n", style="dim")
    if m.get("description"):
        text.append(shown(m["description"]) + "\n", style="italic")
    values = report.values or f"seed {m['seed']}"
    mode = "structural (no numbers)" if m["mode"] == "structural" else f"numeric, {values}"
    text.append(f"{mode}; {plural(m['params'], 'parameter')}, {plural(m['param_count'], 'value')}; "
                f"{plural(m['nodes'], 'node')}")
    return text


def shape_text(p) -> str:
    return "[" + ", ".join(map(str, p.shape)) + "]"


def table(report, losses: list, body: list) -> Table:
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    t.add_column("parameter", no_wrap=True)
    # min_width: a shape's space is no place to wrap, and the table's measure must know it
    t.add_column("shape", no_wrap=True, min_width=max(len("shape"), *(len(shape) for _, shape, _ in body)))
    for loss in losses:   # a terminal too narrow for one loss: its cells wrap, names stay whole
        t.add_column(shown(loss.name), overflow="fold")
    index = [report.losses.index(l) for l in losses]
    if report.model["mode"] == "numeric":
        t.add_row(Text("loss value", style="dim"), "", *(Text(number(l.value), style="dim") for l in losses),
                  end_section=True)
    for name, shape, cells in body:
        t.add_row(name, shape, *(cells[i] for i in index))
    return t


def loss_groups(report, body: list, width: int | None) -> list:
    """The losses in groups whose columns fit ``width`` beside the parameter and shape
    columns, so a narrow terminal gets several tables rather than broken names."""
    if width is None or not body:
        return [report.losses]
    fixed = max(len("parameter"), *(len(r[0]) for r in body)) + 2 + max(len("shape"), *(len(r[1]) for r in body)) + 2
    groups, current, used = [], [], fixed
    for k, loss in enumerate(report.losses):
        need = max(len(loss.name), len(number(loss.value)), *(len(r[2][k].plain) for r in body)) + 2
        if current and used + need > width:
            groups.append(current)
            current, used = [], fixed
        current.append(loss)
        used += need
    return groups + [current]


def records(report, body: list, width: int) -> list:
    """The table as a record per row (see as_records), for a terminal too narrow for a table with
    even one loss: the row's name and shape, then a line per loss (the loss value first, as the
    table has it)."""
    names = [shown(loss.name) for loss in report.losses]
    if report.model["mode"] == "numeric":
        body = [(Text("loss value", style="dim"), "", [Text(number(l.value), style="dim") for l in report.losses]),
                *body]
    return as_records([(name + (f"  {shape}" if shape else ""), cells) for name, shape, cells in body], names, width)


def legend(report, body: list, notes: Notes) -> str:
    """What the cells show, and only the marks that appear in them."""
    texts = [c.plain for _, _, cells in body for c in cells]
    parts = ["cells: status" + ("" if report.model["mode"] == "structural" else " and gradient L2 norm")]
    if any(" ~[" in t for t in texts):
        parts.append("~ partly cut")
    if any(t.endswith(" " + PROBLEM) for t in texts):
        parts.append(f"{PROBLEM} not as intended")
    if notes.texts:
        parts.append("[n] the notes below")
    return "; ".join(parts)


def render_report(report, no_color: bool, expand: bool = False, problems: bool = False) -> None:
    out = console(no_color)
    out.print(header(report))
    notes = Notes(report.model["path"])
    body = rows(report, notes, expand, problems)
    width = out.width if out.is_terminal else None
    if body:
        tables = [table(report, losses, body) for losses in loss_groups(report, body, width)]
        # a number or a word is never cut; measured for a terminal only, a pipe gets whole lines
        if width is not None and max(widths(out, t).minimum for t in tables) > width:
            for line in records(report, body, width):   # a name and a loss cannot share a line
                out.print(line)
        else:
            for k, t in enumerate(tables):
                if k:
                    out.print()
                emit(out, t)
        out.print(Text(legend(report, body, notes), style="dim"))
    elif problems:
        out.print(Text("every pair is as intended", style="green"))
    for text, n in notes.texts.items():
        out.print(Text(shown(f"[{n}] {text}")), soft_wrap=not out.is_terminal)
    if report.findings:
        out.print()
    for f in report.findings:   # one line, as check prints it: its see: command copies whole
        out.print(finding_line(f), soft_wrap=True)
    out.print(verdict(report), soft_wrap=not out.is_terminal)
