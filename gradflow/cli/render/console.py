"""Rich consoles that follow the terminal: colour only on a terminal, never with NO_COLOR
or --no-color. Renderers of plain lines print through lines.py, which needs rich only on
a terminal."""

from __future__ import annotations

import os
import re
import sys

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from gradflow.cli.render.lines import LOOSE, NO_BREAK, PIPE_WIDTH, Line, as_is


class _Console(Console):
    def print(self, *objects, **kwargs) -> None:
        """Text wraps between words only: a name longer than the line stays whole (the
        terminal shows the rest on the next row), never folded or cut as rich would."""
        objects = tuple(o.rich() if isinstance(o, Line) else o for o in objects)
        if self.is_terminal:
            if objects and all(isinstance(o, (str, Text)) for o in objects) and not kwargs.get("soft_wrap"):
                objects = tuple(between_words(o if isinstance(o, Text) else Text(o), self.width) for o in objects)
                kwargs.update(no_wrap=True, crop=False, overflow="ignore")
        elif self.wrote_plainly(objects, kwargs):
            return
        super().print(*objects, **kwargs)

    def wrote_plainly(self, objects: tuple, kwargs: dict) -> bool:
        """Write one line of ASCII Text into a pipe or a file as it is, skipping rich's
        rendering (most of the time of a table's notes and findings); exactly what rich
        would write, the tests compare the two. False, writing nothing, for anything else."""
        if len(objects) != 1 or not isinstance(objects[0], Text) or set(kwargs) - {"soft_wrap"} \
                or self.quiet or self.record or self.color_system is not None \
                or getattr(self, "_buffer_index", 1) or getattr(self, "_render_hooks", True):
            return False   # inside a capture or a live display, or output rich must style
        plain = objects[0].plain
        if objects[0].justify is not None or not as_is(plain, kwargs.get("soft_wrap", self.soft_wrap), self.width):
            return False   # justified, wide or tabbed characters, or lines rich would wrap
        try:
            self.file.write(plain + "\n")
            self.file.flush()
        except BrokenPipeError:
            self.on_broken_pipe()
        return True

    def on_broken_pipe(self) -> None:
        """stdout was closed (``| head``): end the way every command ends then, not rich's way."""
        self.quiet = True
        raise BrokenPipeError


def console(no_color: bool = False, stderr: bool = False, file=None) -> Console:
    if file is None:
        file = sys.stderr if stderr else sys.stdout   # looked up now: test runners swap them
    plain = no_color or "NO_COLOR" in os.environ
    env = environ()
    out = _Console(file=file, no_color=plain, color_system=None if plain else "auto",
                   highlight=False, soft_wrap=False, _environ=env)
    if not out.is_terminal:    # a pipe or a file: whole lines, never wrapped at 80 columns
        out.width = PIPE_WIDTH
    elif out.is_dumb_terminal and "COLUMNS" in env:   # Emacs' shell: rich would take 80 columns
        out.size = (int(env["COLUMNS"]), int(env.get("LINES", 25)))
    return out


def environ() -> dict:
    """The environment rich sizes itself from, with COLUMNS and LINES held to 40..1000 and
    10..1000 when they are numbers: COLUMNS=0 (as some CI runners set it) printed nothing,
    a few columns a word per line, and 5,000 digits failed to convert."""
    env = dict(os.environ)
    for name, low in (("COLUMNS", 40), ("LINES", 10)):
        text = env.pop(name, "").strip()
        if text.isascii() and text.isdigit():
            env[name] = str(1000 if len(text) > 4 else min(max(int(text), low), 1000))
    return env


# Blanks at the end of a line, among any colour codes that close it (kept).
TRAILING_BLANKS = re.compile(r"(?: |\x1b\[[0-9;]*m)+$")


def emit(out: Console, renderable) -> None:
    """Print a table: on a terminal as rich draws it (one that cannot fit the terminal is given
    as records instead: see widths), into a pipe at its natural width, never wrapped, without
    the blanks rich pads the last column with."""
    if out.is_terminal:
        out.print(renderable)
        return
    with out.capture() as captured:
        out.print(renderable)
    text = "\n".join(TRAILING_BLANKS.sub(lambda end: end.group().replace(" ", ""), line)
                     for line in captured.get().splitlines())
    out.file.write(text + "\n")


def widths(out: Console, table):
    """A table's width with nothing wrapped (maximum), and with every cell wrapped between
    words but none cut (minimum), as rich measures it."""
    from rich.measure import Measurement
    return Measurement.get(out, out.options.update_width(10 ** 4), table)


def as_records(rows: list, names: list, width: int) -> list:
    """A table as a record per row, for a terminal too narrow for it: ``rows`` are (head, cells),
    a record the head, then a line per cell, its column's name in ``names`` and the cell, the
    cells in one column where each line fits then."""
    pad = max(map(cell_len, names))
    if 2 + pad + 2 + max((cell_len(str(c)) for _, row in rows for c in row), default=0) > width:
        pad = 0
    lines = []
    for head, row in rows:
        lines.append(head)
        lines += [Text.assemble(f"  {name}{' ' * (pad - cell_len(name))}  ", c) for name, c in zip(names, row)]
    return lines


# Held together as a line wraps: a place, '(line 12:7)', never 'line' at one line's end and '12:7)' at
# the next; a count and its noun, never '0' at one line's end and 'errors' at the next.
HELD = re.compile(r"\(line \d+:\d+\)|(?<![\w.:,])\d+(?:,\d{3})* (?=[a-z])")
# The parts of a line, then of a part that cannot fit a line, then its words.
PARTS = (re.compile("[^ ]+"), re.compile(f"[^ {LOOSE}]+"), re.compile(f"[^ {LOOSE}{NO_BREAK}]+"))
LEAD = re.compile(r" *(\d+\. )?")


def between_words(text: Text, width: int, prefix: str | None = None) -> Text:
    """``text`` with its spaces turned into line breaks where a line would pass ``width``. A
    line's continuations start with ``prefix``: a tree's guides (a line they leave no room
    beside stays whole), by default blanks under its first word after its indent and a `1. `
    marker, which stay with that word. A part held by no-break spaces comes apart only where
    it cannot fit a line of its own, at its LOOSE holds first; a word longer than a line gets
    one of its own, whole. The holds are written as spaces: what is copied from the terminal
    is what a pipe gets."""
    plain, breaks = HELD.sub(lambda held: held.group().replace(" ", NO_BREAK), text.plain), []
    for line_start, line in line_spans(plain):
        lead, rest = lead_of(line, prefix)
        if prefix is None or cell_len(prefix) < width:   # guides as wide as the line: no room to wrap in
            breaks += [(line_start + end, line_start + start, rest)
                       for end, start in broken(line, lead, cell_len(rest), width)]
    if not breaks and LOOSE not in text.plain and NO_BREAK not in text.plain:
        return text
    parts = text.divide([k for end, start, _ in breaks for k in (end, start)])
    out = Text()
    for k, part in enumerate(parts):
        if k % 2 == 0:
            out.append_text(part)
        else:
            out.append("\n" + breaks[k // 2][2])
    out.plain = out.plain.replace(LOOSE, " ").replace(NO_BREAK, " ")   # as long as before: the styles stay
    return out


def lead_of(line: str, prefix: str | None) -> tuple:
    """(how many characters start ``line`` before its first word, its continuations' prefix)."""
    if prefix is not None:
        return len(prefix), prefix
    lead = LEAD.match(line)
    return lead.end(), " " * (lead.end() + (0 if lead.group(1) else 2))


def broken(line: str, lead: int, hang: int, width: int) -> list:
    """(end of a line's last word, start of the next line's first) of each break in ``line``,
    its continuations ``hang`` columns in: a part goes on the line it fits, else on a line of
    its own where it fits one, else in its parts (PARTS), each so; a word where it must."""
    breaks, column, last = [], cell_len(line[:lead]), None   # last: where the line's last word ends

    def put(start: int, end: int, depth: int) -> None:
        nonlocal column, last
        size, gap = cell_len(line[start:end]), 0 if last is None else cell_len(line[last:start])
        if column + gap + size > width:   # not on this line
            word = depth == len(PARTS) - 1
            if last is not None and (hang + size <= width or word):   # on the next
                breaks.append((last, start))
                column, gap = hang, 0
            elif not word:   # in its parts
                for part in PARTS[depth + 1].finditer(line, start, end):
                    put(*part.span(), depth + 1)
                return
        column += gap + size
        last = end

    for part in PARTS[0].finditer(line, lead):
        put(*part.span(), 0)
    return breaks


def line_spans(plain: str):
    start = 0
    for line in plain.split("\n"):
        yield start, line
        start += len(line) + 1

