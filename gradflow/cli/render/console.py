"""Consoles that follow the terminal: colour only on a terminal, never with NO_COLOR
or --no-color; progress bars only when stderr is a terminal."""

from __future__ import annotations

import os
import sys

from rich.console import Console


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """stdout was closed (``| head``): end the way every command ends then, not rich's way."""
        self.quiet = True
        raise BrokenPipeError


def console(no_color: bool = False, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout   # looked up now: test runners swap them
    plain = no_color or "NO_COLOR" in os.environ
    return _Console(file=stream, no_color=plain, color_system=None if plain else "auto",
                    highlight=False, soft_wrap=False, _environ=environ())


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


def progress(items, label: str):
    """Iterate ``items`` (futures are waited for), with a bar on stderr when it is a terminal
    and there is enough work to be worth one."""
    items = list(items)
    err = console(stderr=True)
    if not err.is_terminal or len(items) < 5:
        yield from items
        return
    from concurrent.futures import Future   # here, not at the top: it loads logging and more
    from rich.progress import Progress
    with Progress(console=err, transient=True) as bar:
        task = bar.add_task(label, total=len(items))
        for item in items:
            if isinstance(item, Future):
                item.result()
            yield item
            bar.advance(task)
