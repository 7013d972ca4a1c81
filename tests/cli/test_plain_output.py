"""Text into a pipe or a file skips rich's rendering: the bytes must be the ones rich writes."""

from __future__ import annotations

import io
import sys

import pytest
from rich.console import Console
from rich.text import Text

from gradflow.cli.render.console import PIPE_WIDTH, console

STYLED = Text("models/m.yaml:3:5: ")
STYLED.append("error", style="bold red")
STYLED.append(": w gets no gradient [GF102]")
STYLED.append(" see: gradflow why models/m.yaml w", style="dim")

PLAIN = [Text("plain words"), STYLED, Text("two\nlines\n\nand a blank"), Text(""), Text("   padded   "),
         Text("\x1b[2J stays as rich leaves it"), Text("x" * 99 + " " + "y" * 99)]
OTHERS = [Text("tab\tseparated"), Text("ünïcode → 名前"), Text("right", justify="right"),
          Text("w " * (PIPE_WIDTH // 2 + 10))]


def both(monkeypatch, text: Text, **kwargs) -> tuple[str, str, bool]:
    """(ours, rich's, whether ours skipped rich) for one print into a pipe."""
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    plainly = console().wrote_plainly((text,), kwargs)
    ours = sys.stdout.getvalue()
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    Console.print(console(), text, **kwargs)
    return ours, sys.stdout.getvalue(), plainly


@pytest.mark.parametrize("soft_wrap", [None, True, False])
@pytest.mark.parametrize("text", PLAIN, ids=repr)
def test_plain_text_into_a_pipe_is_what_rich_writes(monkeypatch, text, soft_wrap):
    ours, theirs, plainly = both(monkeypatch, text, **({} if soft_wrap is None else {"soft_wrap": soft_wrap}))
    assert plainly and ours == theirs


@pytest.mark.parametrize("text", OTHERS, ids=lambda t: repr(t.plain[:20]))
def test_text_rich_must_lay_out_is_left_to_rich(monkeypatch, text):
    ours, theirs, plainly = both(monkeypatch, text)
    assert not plainly and ours == ""
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    console().print(text)
    assert sys.stdout.getvalue() == theirs


def test_a_capture_is_left_to_rich(monkeypatch):
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    out = console()
    with out.capture() as captured:
        out.print(STYLED)
    assert captured.get() == STYLED.plain + "\n" and sys.stdout.getvalue() == ""
