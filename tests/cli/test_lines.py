"""Lines into a pipe without rich: the same bytes as through rich, rich left unloaded, and
rich still drawing wherever it might see a terminal."""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys

import pytest
from rich.text import Text

from gradflow.cli.render import lines
from gradflow.cli.render.console import console
from gradflow.cli.render.lines import PIPE_WIDTH, Line, Pipe, output, progress
from gradflow.cli.render.text import render_check
from gradflow.cli.run import check_one
from tests.conftest import MODELS, ROOT

OPTIONS = {"dims": (), "seed": None, "dtype": "float64", "structural": False, "counterfactual": False}


def styled() -> tuple[Line, Text]:
    """The same line built both ways: base style, appended pieces, a Line added to a Line."""
    line, text = Line("models/m.yaml: ", style="dim"), Text("models/m.yaml: ", style="dim")
    tail, text_tail = Line("verdict: w"), Text("verdict: w")
    tail.append("; 1 error", "bold red").append(" see: x", "dim").append(" plain")
    text_tail.append("; 1 error", style="bold red").append(" see: x", style="dim").append(" plain")
    return line + tail + " end", text + text_tail + " end"


def test_a_line_makes_the_text_rich_would_have_built():
    line, text = styled()
    made = line.rich()
    assert made.plain == line.plain == text.plain
    assert made.style == text.style and made.spans == text.spans


def test_adding_to_a_line_leaves_it_as_it_was():
    line = Line("a", style="dim")
    longer = line + "b"
    assert line.plain == "a" and longer.plain == "ab" and longer.style == "dim"


CASES = ["plain words", "two\nlines\n\nand a blank", "", "   padded   ", "\x1b[2J stays", "x" * 300,
         "tab\tseparated", "ünïcode → 名前", "bell\a and return\r", "w " * (PIPE_WIDTH // 2 + 10)]


@pytest.mark.parametrize("soft_wrap", [True, False])
@pytest.mark.parametrize("words", CASES, ids=lambda w: repr(w[:20]))
def test_a_pipe_writes_what_rich_writes(words, soft_wrap):
    line = Line(words[:3], style="dim").append(words[3:], "bold red")
    ours, theirs = io.StringIO(), io.StringIO()
    Pipe(ours).print(line, soft_wrap=soft_wrap)
    console(file=theirs).print(line.rich(), soft_wrap=soft_wrap)
    assert ours.getvalue() == theirs.getvalue()


def test_a_pipe_prints_a_blank_line_and_ends_quietly_when_closed():
    out = io.StringIO()
    Pipe(out).print()
    assert out.getvalue() == "\n"

    class Closed(io.StringIO):
        def write(self, text):
            raise BrokenPipeError

    pipe = Pipe(Closed())
    with pytest.raises(BrokenPipeError):
        pipe.print(Line("x"))
    pipe.print(Line("y"))   # quiet from then on, as rich's console is after a closed pipe
    assert pipe.quiet


class Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("setting", ["FORCE_COLOR", "TTY_COMPATIBLE"])
def test_rich_decides_whenever_it_might_see_a_terminal(monkeypatch, setting):
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert isinstance(output(), Pipe)
    monkeypatch.setenv(setting, "1")
    assert not isinstance(output(), Pipe) and output().is_terminal
    monkeypatch.delenv(setting)
    monkeypatch.setattr(sys, "stdout", Tty())
    assert not isinstance(output(), Pipe) and output().is_terminal
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setitem(sys.modules, "IPython", object())
    assert not isinstance(output(), Pipe)


def test_progress_over_a_pipe_yields_every_item(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert list(progress(range(7), "checking")) == list(range(7)) and sys.stderr.getvalue() == ""


def test_check_text_into_a_pipe_is_what_rich_writes(monkeypatch, tmp_path, capsys):
    """Every model and bug fixture (findings, verdicts, a failed summary) and a non-ASCII
    path (through rich after all), printed as Lines and through a rich console."""
    odd = tmp_path / "módel.yaml"
    odd.write_text((MODELS / "dead_relu.yaml").read_text())
    paths = sorted(MODELS.glob("*.yaml")) + sorted((ROOT / "tests/models/bugs").glob("*.yaml")) + [odd]
    results = [check_one(str(p), {}, OPTIONS) for p in paths]
    assert all(r.error is None for r in results) and any(r.failed for r in results)
    render_check(results, False)
    ours = capsys.readouterr().out
    monkeypatch.setattr(lines, "surely_not_a_terminal", lambda stream: False)
    render_check(results, False)
    assert ours == capsys.readouterr().out and "módel.yaml" in ours


def loaded_by_check(*args: str, env: dict | None = None) -> tuple[str, list]:
    """(stdout, rich's modules loaded) of `gradflow check` run in a fresh process into a pipe."""
    code = ("import atexit, sys; from gradflow.cli.main import main; sys.argv = ['gradflow', 'check', *sys.argv[1:]]\n"
            "rich = lambda: sorted(m for m in sys.modules if m.split('.')[0] == 'rich')\n"
            "atexit.register(lambda: print(rich(), file=sys.stderr))\nmain()")
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE")}
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT,
                          env={**environ, **(env or {})})
    return done.stdout, ast.literal_eval(done.stderr.strip().splitlines()[-1])


def test_check_into_a_pipe_never_loads_rich():
    printed, loaded = loaded_by_check(str(MODELS))   # enough models for a progress bar on a terminal
    assert loaded == [] and f"{len(list(MODELS.glob('*.yaml')))} models checked: ok" in printed


def test_check_with_forced_colour_draws_through_rich():
    printed, loaded = loaded_by_check(str(MODELS / "dead_relu.yaml"), env={"FORCE_COLOR": "1", "TERM": "xterm"})
    assert "rich.console" in loaded and "\x1b[33mwarning\x1b[0m" in printed


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
@pytest.mark.parametrize("flag, coloured", [([], True), (["--no-color"], False)])
def test_progress_bar_on_a_terminal_follows_no_color(flag, coloured):
    main, terminal = os.openpty()
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE")}
    done = subprocess.run([sys.executable, "-m", "gradflow.cli.main", *flag, "check", str(MODELS)], cwd=ROOT,
                          stdout=subprocess.DEVNULL, stderr=terminal, env={**environ, "TERM": "xterm"})
    os.close(terminal)
    written = b""
    while True:
        try:
            chunk = os.read(main, 1 << 16)
        except OSError:        # the terminal's other end is closed: all is read
            break
        if not chunk:
            break
        written += chunk
    os.close(main)
    assert done.returncode == 0 and b"\x1b[" in written        # the bar was drawn
    assert bool(re.search(rb"\x1b\[[0-9;]*m", written)) == coloured
