"""Mutated models through the command line: a clean result or one located error, never a crash.

The shipped models under models/ are read at test time and broken at random: lines
deleted, duplicated or swapped, characters changed, YAML and expression junk
inserted, expression tokens replaced, keys dropped, raw bytes spliced in. Whatever
comes out, `gradflow check` and `gradflow analyze --format json` must either succeed
(exit 0 or 1, and JSON that parses) or exit 2 with exactly one
``FILE:LINE:COL: error:`` line on stderr: no traceback, no internal error, no hang.

The examples are derandomized so CI sees the same ones every run; set
GRADFLOW_FUZZ_EXAMPLES=N to explore N fresh random examples per test instead.
"""

from __future__ import annotations

import json
import os
import re
import time
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradflow.cli.main import cli
from tests.conftest import MODELS

EXPLORE = int(os.environ.get("GRADFLOW_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=EXPLORE or 150, derandomize=not EXPLORE, deadline=None,
                database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SECONDS = 2.0
LOCATED = re.compile(r"(?P<path>.+):(?P<line>\d+):(?P<col>\d+): error: (?P<message>.+)")
COMMANDS = [("check",), ("analyze", "--format", "json"), ("check", "--format", "json"),
            ("analyze", "--format", "json", "--structural")]

YAML_JUNK = ["(", ")", "[", "]", "{", "}", ": :", ":", "- ", "? ", ",", "#", "'", '"', "|", ">",
             "---\n", "...\n", "\t", "~", "\\", "*a", "&a ", "&a [1, 2]", "<<: *a", "!!binary",
             "!!python/name:os.system", "!!python/object/apply:os.system ['true']", "%YAML 1.1\n",
             "é", "\u2603", "\u2028", "\x85", "\ufeff", "\x00", "\x1b[31m", "1e999", "-0",
             "9" * 400, "0x" + "f" * 40, "[" * 300, "{a: " * 100, "]" * 50]
EXPR_JUNK = ["(", ")", "[", "]", ",", "@", "**", "%", "//", "not ", "__import__('os')", "x.sum()",
             "lambda v: v", "f'{x}'", "a if b else c", "0 < a < 1", "(" * 300, "relu(", "relux",
             "axis=7", "keepdims=True", "stop_gradient", "detach(", "repeat(", "None", "True", "...",
             "[:, None]", "[0]", "[-1:]", "10 ** 400", "99999999999999999999", "1e308", "-", "*"]
TOKENS = ["relu", "mean", "sum", "reshape", "concat", "matmul", "stop_gradient", "x", "h", "w",
          "batch", "axis", "0", "1", "-1", "2.5", "4096", "10**20", "()", "[]", "[0, 0]", "'s'"]
TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*|\d+(?:\.\d+)?|\S")
KEY_LINE = re.compile(r"^(\s*)(?:- )?[A-Za-z_][\w.]*\s*:")


def shipped_models() -> list[Path]:
    return sorted(MODELS.glob("*.yaml"))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """One folder for every example (hypothesis reuses function-scoped fixtures anyway)."""
    invoke(("check", str(shipped_models()[0])))   # import what the commands import lazily
    return tmp_path_factory.mktemp("fuzz")


def invoke(args):
    """Run the CLI; the result, the seconds it took and the Python warnings it raised
    (each one more line on a real stderr, which pytest would catch out of sight)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        result = CliRunner().invoke(cli, list(args))
        seconds = time.perf_counter() - start
    return result, seconds, [w for w in caught]


def assert_clean_outcome(path: Path, command: tuple) -> None:
    """Run one command on path: success with parseable JSON, or one located error line."""
    args = (command[0], str(path), *command[1:], "--max-memory", "64MiB")
    result, seconds, caught = invoke(args)
    out, err = result.stdout, result.stderr
    assert "Traceback" not in out + err
    assert result.exit_code in (0, 1, 2), (result.exit_code, err, result.exception)
    assert seconds < SECONDS, f"{' '.join(args)} took {seconds:.2f} s"
    if result.exit_code == 2:
        lines = err.splitlines()
        assert len(lines) == 1, f"expected one error line on stderr, got {lines!r}"
        match = LOCATED.fullmatch(lines[0])
        assert match and match["path"] == str(path), lines[0]
        assert int(match["line"]) >= 1 and int(match["col"]) >= 1
        assert "internal error" not in match["message"]
        assert not caught, f"warnings would print on stderr too: {[str(w.message) for w in caught]}"
        if command[0] == "analyze":
            assert out == ""
    else:   # a numeric run may warn about overflow; nothing else may leak out
        assert all(issubclass(w.category, RuntimeWarning) for w in caught), [str(w.message) for w in caught]
        if "json" in command:
            json.loads(out)


def mutate_lines(lines: list[str], data) -> list[str]:
    """One random line-level mutation."""
    lines = list(lines) or [""]
    i = data.draw(st.integers(0, len(lines) - 1), label="line")
    kind = data.draw(st.sampled_from(["delete", "duplicate", "swap", "char", "junk", "token"]))
    if kind == "delete":
        del lines[i]
    elif kind == "duplicate":
        lines.insert(data.draw(st.integers(0, len(lines))), lines[i])
    elif kind == "swap":
        j = data.draw(st.integers(0, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
    else:
        at = data.draw(st.integers(0, len(lines[i])), label="column")
        if kind == "char":
            new = data.draw(st.characters(codec="utf-8", exclude_categories=["Cs"]))
            lines[i] = lines[i][:at] + new + lines[i][at + 1:]
        elif kind == "junk":
            lines[i] = lines[i][:at] + data.draw(st.sampled_from(YAML_JUNK)) + lines[i][at:]
        else:
            lines[i] = replace_token(lines[i], data)
    return lines


def replace_token(line: str, data) -> str:
    """Replace one token of a line (a name, a number or a punctuation mark)."""
    tokens = list(TOKEN.finditer(line))
    if not tokens:
        return line
    token = data.draw(st.sampled_from(tokens), label="token")
    new = data.draw(st.sampled_from(TOKENS + EXPR_JUNK))
    return line[:token.start()] + new + line[token.end():]


def graph_lines(lines: list[str]) -> list[int]:
    """Indices of lines that hold an expression (in a graph: NAME: EXPRESSION)."""
    out, inside = [], None
    for i, line in enumerate(lines):
        indent = len(line) - len(line.lstrip())
        if line.strip().startswith("graph:"):
            inside = indent
        elif inside is not None and line.strip() and indent <= inside:
            inside = None
        elif inside is not None and ":" in line and not line.lstrip().startswith("#"):
            out.append(i)
    return out


def drop_key(lines: list[str], i: int) -> list[str]:
    """Delete the key on line i together with the block indented under it."""
    indent = len(lines[i]) - len(lines[i].lstrip())
    end = i + 1
    while end < len(lines) and (not lines[end].strip() or
                                len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    return lines[:i] + lines[end:]


def draw_model(data):
    """A shipped model and its lines, drawn by hypothesis."""
    source = data.draw(st.sampled_from(shipped_models()), label="model")
    return source, source.read_text(encoding="utf-8").split("\n")


def write_and_check(workdir, source, lines, data) -> None:
    path = workdir / source.name
    path.write_text("\n".join(lines), encoding="utf-8")
    assert_clean_outcome(path, data.draw(st.sampled_from(COMMANDS), label="command"))


@FUZZ
@given(data=st.data())
def test_cli_line_mutations_fail_cleanly_or_succeed(workdir, data):
    source, lines = draw_model(data)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        lines = mutate_lines(lines, data)
    write_and_check(workdir, source, lines, data)


@FUZZ
@given(data=st.data())
def test_cli_expression_mutations_fail_cleanly_or_succeed(workdir, data):
    source, lines = draw_model(data)
    targets = graph_lines(lines)
    assert targets, f"{source.name} has no graph lines to mutate"
    for _ in range(data.draw(st.integers(1, 2), label="mutations")):
        i = data.draw(st.sampled_from(targets), label="line")
        key, _, expression = lines[i].partition(":")
        if data.draw(st.booleans(), label="insert"):
            at = data.draw(st.integers(0, len(expression)), label="column")
            expression = expression[:at] + data.draw(st.sampled_from(EXPR_JUNK)) + expression[at:]
        else:
            expression = replace_token(expression, data)
        lines[i] = f"{key}:{expression}"
    write_and_check(workdir, source, lines, data)


@FUZZ
@given(data=st.data())
def test_cli_dropped_keys_fail_cleanly_or_succeed(workdir, data):
    source, lines = draw_model(data)
    for _ in range(data.draw(st.integers(1, 2), label="drops")):
        keys = [i for i, line in enumerate(lines) if KEY_LINE.match(line)]
        if keys:
            lines = drop_key(lines, data.draw(st.sampled_from(keys), label="key"))
    write_and_check(workdir, source, lines, data)


@FUZZ
@given(data=st.data())
def test_cli_byte_mutations_fail_cleanly_or_succeed(workdir, data):
    source = data.draw(st.sampled_from(shipped_models()), label="model")
    raw = source.read_bytes()
    at = data.draw(st.integers(0, len(raw)), label="offset")
    junk = data.draw(st.binary(min_size=1, max_size=8), label="bytes")
    cut = data.draw(st.integers(0, 4), label="overwrite")
    path = workdir / source.name
    path.write_bytes(raw[:at] + junk + raw[at + cut:])
    assert_clean_outcome(path, data.draw(st.sampled_from(COMMANDS), label="command"))
