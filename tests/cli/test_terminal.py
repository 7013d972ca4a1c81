"""Terminal safety: text from a model never reaches a terminal raw, direction overrides are
refused in model files, CR-only files are located right, any COLUMNS still prints."""

from __future__ import annotations

import os
import re

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import gradflow
from gradflow.cli import escape
from gradflow.cli.escape import shown
from gradflow.cli.main import cli
from gradflow.errors import ModelError
from tests.conftest import MODELS

HOSTILE = r"""
gradflow: 1
name: "\e]0;pwned\a\e[2J"
description: "clears \e[2J the screen\rand\nfakes a line \u202e txt.exe"
params:
  w: {shape: [3]}
graph:
  s: {expr: "stop_gradient(w)", source: "tr\e[2Jain\u202e.py:3:1"}
  z: sum(w * w) + sum(s * s)
losses: [z]
expect:
  z: {blocked: [w]}
"""
UNSAFE = ("\x1b", "\x07", "\r", "\u202e")


def run(*args, env=None):
    # color=True: click would otherwise strip escape sequences, as it does for a pipe.
    return CliRunner().invoke(cli, [str(a) for a in args], color=True, env=env)


@pytest.mark.parametrize("text, expected", [
    ("plain words", "plain words"),
    ("\x1b[2J", "\\x1b[2J"),
    ("a\nb\tc\rd", "a\\nb\\tc\\rd"),
    ("\x9b31m\x7f", "\\x9b31m\\x7f"),
    ("abc\u202etxt.exe\u2066", "abc\\u202etxt.exe\\u2066"),
    ("name\udcff.yaml", "name\\xff.yaml"),   # a byte that is not UTF-8, from os.fsdecode
    ("line\u2028sep", "line\\u2028sep"),
    ("not\uffffxml", "not\\uffffxml"),
    ("ünïcode → fine", "ünïcode → fine"),
])
def test_shown_escapes_control_direction_and_undecodable_characters(text, expected):
    assert shown(text) == expected


@pytest.mark.parametrize("args", [
    "analyze M", "analyze M --format markdown", "check M", "check M --format markdown",
    "check M --format github", "check M --format junit", "why M w", "graph M", "gradcheck M",
])
def test_model_text_reaches_no_renderer_raw(write_model, args):
    path = write_model(HOSTILE)
    result = run(*[path if a == "M" else a for a in args.split()], env={"COLUMNS": "400"})
    assert result.exit_code in (0, 1), result.output
    out = result.stdout + result.stderr
    assert [c for c in UNSAFE if c in out] == []
    if args == "analyze M":
        assert "\\x1b]0;pwned\\x07\\x1b[2J" in out and "\\u202e txt.exe" in out
    if args.split()[0] in ("why", "graph"):   # a place in another file, named by the model
        assert "tr\\x1b[2Jain\\u202e.py:3:1" in out


@pytest.mark.parametrize("where, text, col", [
    ("comment", "  z: sum(w)  # \u202e } ;gnirts\n", 16),
    ("expression", "  z: sum(w) \u2066+ 0\n", 13),
    ("quoted", '  z: "sum(w)\u202c"\n', 13),
])
def test_bidirectional_overrides_are_refused_with_a_place(write_model, where, text, col):
    path = write_model("gradflow: 1\nparams:\n  w: {shape: [3]}\ngraph:\n" + text + "losses: [z]\n")
    with pytest.raises(ModelError) as caught:
        gradflow.load(path)
    e = caught.value
    assert (e.line, e.col) == (5, col) and "changes the direction of the text" in e.message


@pytest.mark.parametrize("text, place", [
    ("gradflow: 1\nparams:\n  w: {shape: [3]}\ngraph:\n  z: sum(relux(w))\nlosses: [z]\n", (5, 10)),
    ("gradflow: 1\nparams:\n  w: {shape: [3]}\ngraph:\n  z: |\n    sum(\n      relux(w))\nlosses: [z]\n",
     (7, 7)),
    ("gradflow: 1\n# a comment\nparams:\n  w: {shape: [3]}\x01\n", (4, 18)),
])
@pytest.mark.parametrize("newline", ["\n", "\r", "\r\n"])
def test_line_endings_do_not_move_error_places(tmp_path, text, place, newline):
    path = tmp_path / "m.yaml"
    path.write_bytes(text.replace("\n", newline).encode())
    with pytest.raises(ModelError) as caught:
        gradflow.load(str(path))
    assert (caught.value.line, caught.value.col) == place


@pytest.mark.parametrize("columns", ["0", "1", "-3", "abc", "100000000", "9" * 5000])
def test_any_columns_value_still_prints_the_table(columns):
    result = run("analyze", MODELS / "stop_gradient_tape.yaml", env={"COLUMNS": columns, "LINES": columns})
    assert result.exit_code == 0
    assert "stop_gradient_tape" in result.stdout and "flows 7" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 1000


def test_a_narrow_terminal_still_keeps_words_whole():
    result = run("analyze", str(MODELS / "stop_gradient_tape.yaml"), env={"COLUMNS": "0"})
    assert "stop_gradient" in result.stdout and os.linesep.join(["s", "t"]) not in result.stdout


@pytest.mark.parametrize("text, wrapped", [
    ("deep_sigmoid_vanishing  models/deep_sigmoid_vanishing.yaml",
     "deep_sigmoid_vanishing\n  models/deep_sigmoid_vanishing.yaml"),
    ("  reconstruction_loss_with_perceptual_term  0.267", "  reconstruction_loss_with_perceptual_term\n    0.267"),
    ("  1. a_long_entry_name -> another_entry_name   -> loss",
     "  1. a_long_entry_name ->\n     another_entry_name   -> loss"),
])
def test_a_line_wrapped_between_words_ends_at_its_last_word(text, wrapped):
    # the blanks where it breaks go, all of them: none is left at the end of the line above
    from rich.text import Text

    from gradflow.cli.render.console import between_words
    assert between_words(Text(text), 40).plain == wrapped


def wrap(text: str, width: int, *prefix: str) -> str:
    from rich.text import Text

    from gradflow.cli.render.console import between_words
    return between_words(Text(text), width, *prefix).plain


@pytest.mark.parametrize("width, lines", [
    (30, ["entry code [x argmin 24:9]"]),
    (24, ["entry", "  code [x argmin 24:9]"]),     # the held part fits a line of its own: whole there
    (20, ["entry code", "  [x argmin 24:9]"]),     # it does not: apart at its loose hold, the mark whole
    (12, ["entry code", "  [x argmin", "  24:9]"]),   # nor does the mark: between its words
    (4, ["entry", "  code", "  [x", "  argmin", "  24:9]"]),   # a word longer than the line: one of its own
])
def test_a_held_part_comes_apart_only_where_it_cannot_fit_a_line_of_its_own(width, lines):
    assert wrap("entry code\u202f[x\u00a0argmin\u00a024:9]", width) == "\n".join(lines)


@pytest.mark.parametrize("text, width, prefix, lines", [
    # continuations start with the prefix, and the guides before it stay with the first word
    ("│   ├── soft  x\u00a0argmax\u00a019:17", 20, "│   │   ", ["│   ├── soft  x", "│   │   argmax 19:17"]),
    ("│   ├── a_name_longer_than_the_line (param)", 20, "│   │   ",
     ["│   ├── a_name_longer_than_the_line", "│   │   (param)"]),
    ("│   │   ├── x (input)", 12, "│   │   │   ", ["│   │   ├── x (input)"]),   # no room beside the prefix
    ("", 20, "│   ", [""]),
])
def test_a_line_continues_after_its_prefix(text, width, prefix, lines):
    assert wrap(text, width, prefix) == "\n".join(lines)


@pytest.mark.parametrize("text, width, lines", [
    ("  1. block.0.attention.wq -> h", 20, ["  1. block.0.attention.wq", "     -> h"]),   # never '1.' alone
    ("  the gradient dies at relu in h", 20, ["  the gradient dies", "    at relu in h"]),
    ("  loss value", 3, ["  loss", "    value"]),   # no room beside the blanks: a word a line, as ever
])
def test_a_line_continues_under_its_first_word_after_its_indent_and_marker(text, width, lines):
    assert wrap(text, width) == "\n".join(lines)


def test_no_break_spaces_are_written_as_spaces_with_the_styles_where_they_were():
    from rich.text import Text

    from gradflow.cli.render.console import between_words
    text = Text("a\u00a0b\u202fc d")
    text.stylize("red", 2, 5)   # 'b c'
    whole, broken = between_words(text, 80), between_words(text, 3)
    assert whole.plain == "a b c d" and [whole.plain[s.start:s.end] for s in whole.spans] == ["b c"]
    assert broken.plain == "a b\n  c\n  d" and [broken.plain[s.start:s.end] for s in broken.spans] == ["b", "c"]


@pytest.mark.parametrize("text, width, lines", [
    ("verdict: loss trains 3 parameters; 0 errors, 0 warnings", 36,
     ["verdict: loss trains 3 parameters;", "  0 errors, 0 warnings"]),
    ("numeric, seed 0; 5 parameters, 1,676 values", 36, ["numeric, seed 0; 5 parameters,", "  1,676 values"]),
    ("flows 7.3 then w1 now", 9, ["flows 7.3", "  then w1", "  now"]),   # not a count: apart as before
])
def test_a_count_stays_with_its_noun_as_a_line_wraps(text, width, lines):
    assert wrap(text, width) == "\n".join(lines)


def test_analyze_in_a_narrow_terminal_ends_no_line_of_its_verdict_with_a_count():
    out = CliRunner().invoke(cli, ["analyze", str(MODELS / "actor_critic.yaml")],
                             env={"COLUMNS": "40", "FORCE_COLOR": "1", "NO_COLOR": "1"}).output
    verdict = out[out.index("verdict:"):]
    assert len(verdict.splitlines()) > 1 and not re.search(r"(?<![\w.])\d+\n", verdict)
    assert "critic_loss trains\n  3 parameters; 0 errors, 0 warnings" in verdict


def test_a_place_stays_whole_as_a_line_wraps():
    # '(line 24:9)' is one unit: never 'line' at the end of one line and '24:9)' on the next
    out = CliRunner().invoke(cli, ["analyze", str(MODELS / "vq_vae.yaml")],
                             env={"COLUMNS": "40", "FORCE_COLOR": "1", "NO_COLOR": "1"}).output
    notes = out.split("the notes below\n")[1].split("verdict:")[0]
    assert "[3] blocked by argmin in code\n  (line 24:9); stop_gradient in\n  codebook_loss (line 29:36)\n" in notes
    assert not re.search(r"\(line\n", out) and "\u00a0" not in out
    why = CliRunner().invoke(cli, ["why", str(MODELS / "dead_relu.yaml"), "w1"],
                             env={"COLUMNS": "40", "FORCE_COLOR": "1", "NO_COLOR": "1"}).output
    assert why.startswith("w1 -> loss: zero\n  the gradient dies at relu in h\n    (line 19:6)\n")


@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40))
def test_shown_leaves_nothing_unsafe_and_keeps_safe_text(text):
    import unicodedata
    out = shown(text)
    unsafe = re.compile(escape.UNSAFE_CHARS)
    assert not unsafe.search(out)
    assert not [c for c in out if unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp")]
    assert not [c for c in out if unicodedata.bidirectional(c) in ("LRE", "RLE", "LRO", "RLO", "PDF",
                                                                      "LRI", "RLI", "FSI", "PDI")]
    if not unsafe.search(text):
        assert out == text
    assert out == unsafe.sub(escape._escape, text)   # printable text skips the pattern: the same
    assert escape.encodable(text) == re.compile(escape.SURROGATES).sub(escape._escape, text)


def test_every_character_shown_escapes_is_unprintable():
    # what lets shown() and encodable() return printable text without searching it
    unsafe = re.compile(escape.UNSAFE_CHARS)
    matched = [chr(c) for c in range(0x110000) if unsafe.match(chr(c))]
    assert len(matched) > 2000 and not [c for c in matched if c.isprintable()]


def test_json_output_is_valid_unicode_for_file_names_that_are_not_utf8(tmp_path):
    import json
    name = os.path.join(os.fsencode(tmp_path), b"model\xff.yaml")
    with open(name, "w") as f:
        f.write("gradflow: 1\nparams:\n  w: {value: 1.0}\ngraph:\n  z: w * nope\nlosses: [z]\n")
    # An invalid model: its path is in both documents, as text in JSON, as a URI in SARIF
    # (where the byte is percent-encoded, exactly as it is on disk).
    for fmt, spelt in (("json", "model\\\\xff.yaml"), ("sarif", "/model%FF.yaml")):
        out = run("check", tmp_path, "--format", fmt).stdout
        out.encode("utf-8")   # strict: no lone surrogate anywhere
        assert "\\udcff" not in out and spelt in out
        json.loads(out)


@pytest.mark.parametrize("fmt", ["text", "json", "junit"])
def test_a_name_the_output_encoding_cannot_spell_is_written_escaped(tmp_path, fmt):
    import subprocess
    import sys
    from tests.conftest import ROOT
    model = tmp_path / "é名.yaml"
    model.write_bytes((MODELS / "stop_gradient_tape.yaml").read_bytes())
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "gradflow.cli.main", "check", "--format", fmt, str(model)],
                          capture_output=True, env=env, cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == b""
    out = done.stdout.decode("utf-8")   # JUnit is an XML document that declares UTF-8
    assert "名" in out or "\\u540d" in out
