"""Lines of styled text, and where they go: into a pipe or a file as they are, without
loading rich (a fifth of a check's start-up, and CI jobs and hooks write into pipes);
onto a terminal through rich (console.py)."""

from __future__ import annotations

import os
import sys

PIPE_WIDTH = 100_000   # a pipe's "width": lines are never wrapped there
# What rich's Text drops from a string (bell, backspace, vertical tab, form feed, carriage
# return) or expands (tab): a line holding one, or any non-ASCII character, goes through rich.
LEFT_TO_RICH = frozenset("\a\b\t\v\f\r")
# The no-break spaces a renderer holds words together with on a terminal, looser first (see
# console.between_words): LOOSE holds parts ('code' and its mark '[x argmin 24:9]'), NO_BREAK a part's words.
LOOSE, NO_BREAK = "\u202f", "\u00a0"


class Line:
    """A line of styled text, built as rich's Text is built (a style for the whole line,
    pieces appended with their own styles) but without rich; ``rich()`` makes that Text."""

    __slots__ = ("text", "style", "pieces")

    def __init__(self, text: str = "", style: str = ""):
        self.text, self.style, self.pieces = text, style, []

    def append(self, piece: str | Line, style: str = "") -> Line:
        self.pieces.append((piece, style))
        return self

    def __add__(self, other: str | Line) -> Line:
        line = Line(self.text, self.style)
        line.pieces = [*self.pieces, (other, "")]
        return line

    @property
    def plain(self) -> str:
        return self.text + "".join(p.plain if isinstance(p, Line) else p for p, _ in self.pieces)

    def rich(self):
        from rich.text import Text
        text = Text(self.text, style=self.style)
        for piece, style in self.pieces:
            text.append(piece.rich() if isinstance(piece, Line) else piece, style or None)
        return text


def as_is(plain: str, soft_wrap: bool, width: int) -> bool:
    """Whether rich writes ``plain`` into a pipe exactly as it is, unstyled."""
    return plain.isascii() and LEFT_TO_RICH.isdisjoint(plain) and (soft_wrap or len(plain) <= width)


def surely_not_a_terminal(stream) -> bool:
    """Whether rich would take ``stream`` for a pipe or a file, for certain: it is no tty, no
    setting forces a terminal, and no notebook or IDLE runs us. When unsure, rich decides."""
    if "FORCE_COLOR" in os.environ or "TTY_COMPATIBLE" in os.environ \
            or "IPython" in sys.modules or "idlelib" in sys.modules:
        return False
    try:
        return not stream.isatty()
    except (AttributeError, ValueError):   # no isatty, or a closed stream
        return False


class Pipe:
    """Lines into a pipe or a file, written as they are: what rich writes there, never
    wrapped or styled (tests compare the two). A line rich must lay out (see LEFT_TO_RICH,
    or longer than PIPE_WIDTH where it may wrap) goes through a rich console after all."""

    is_terminal = False
    width = PIPE_WIDTH

    def __init__(self, stream, no_color: bool = False):
        self.file, self.no_color, self.quiet = stream, no_color, False
        self.through_rich = None

    def print(self, line: Line | None = None, soft_wrap: bool = False) -> None:
        if self.quiet:
            return
        plain = "" if line is None else line.plain
        if not as_is(plain, soft_wrap, PIPE_WIDTH):
            self.rich_console().print(line.rich(), soft_wrap=soft_wrap)
            return
        try:
            self.file.write(plain + "\n")
            self.file.flush()
        except BrokenPipeError:   # stdout was closed (`| head`): every command ends the same way then
            self.quiet = True
            raise

    def rich_console(self):
        if self.through_rich is None:
            from gradflow.cli.render.console import console
            self.through_rich = console(self.no_color, file=self.file)
        return self.through_rich


def output(no_color: bool = False, stderr: bool = False):
    """Where a renderer of lines prints: a Pipe, or a rich console on a terminal."""
    stream = sys.stderr if stderr else sys.stdout   # looked up now: test runners swap them
    if surely_not_a_terminal(stream):
        return Pipe(stream, no_color)
    from gradflow.cli.render.console import console
    return console(no_color, file=stream)


def progress(items, label: str, no_color: bool = False):
    """Iterate ``items``, with a bar on stderr when it is a terminal and there is enough work
    to be worth one: it moves on as the loop takes the next item."""
    items = list(items)
    err = None
    if len(items) >= 5 and not surely_not_a_terminal(sys.stderr):
        from gradflow.cli.render.console import console
        err = console(no_color, stderr=True)
    if err is None or not err.is_terminal:
        yield from items
        return
    from rich.progress import Progress
    with Progress(console=err, transient=True) as bar:
        task = bar.add_task(label, total=len(items))
        for item in items:
            yield item
            bar.advance(task)
