"""Bad input through the command line: every malformed model is one located error line.

Each file in tests/models/invalid/ is a small model with one thing wrong. Its first
line says where the error must point and what it must say:

    # expect: LINE:COL FRAGMENT      the message contains FRAGMENT
    # expect: LINE:COL == MESSAGE    the message is exactly MESSAGE

``{path}`` in either stands for the file as named on the command line. A file that
cannot hold that comment (the empty file) has its expectation in BARE.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from gradflow.cli.main import cli

INVALID = Path(__file__).resolve().parent.parent / "models" / "invalid"
FIXTURES = sorted(INVALID.glob("*.yaml"))
EXPECT = re.compile(r"# expect: (\d+):(\d+) (== )?(.+)")
LOCATED = re.compile(r"(?P<path>.+):(?P<line>\d+):(?P<col>\d+): error: (?P<message>.+)")
BARE = {"empty.yaml": (1, 1, False, "empty model file: expected a mapping with 'gradflow: 1'")}
SECONDS = 1.0

VALID = """\
gradflow: 1
name: mlp_regression
dims:
  batch: 32
  features: 8
inputs:
  x: {shape: [batch, features]}
  y: {shape: [batch]}
params:
  w: {shape: [features]}
graph:
  loss: mean(square(x @ w - y))
losses: [loss]
"""


def expectation(path: Path) -> tuple[int, int, bool, str]:
    """(line, col, exact, message) from the fixture's first line (or BARE)."""
    if path.name in BARE:
        return BARE[path.name]
    first = path.read_bytes().split(b"\n", 1)[0].decode("utf-8")
    match = EXPECT.fullmatch(first)
    assert match, f"{path.name}: the first line must be '# expect: LINE:COL MESSAGE'"
    line, col, exact, message = match.groups()
    return int(line), int(col), bool(exact), message.replace("{path}", str(path))


def invoke(*args: str):
    """Run the CLI; returns the result and the seconds it took.

    A Python warning would be one more line on a real stderr; pytest would catch it
    out of sight, so it is kept on the result and error_line refuses it.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        result = CliRunner().invoke(cli, list(args))
        seconds = time.perf_counter() - start
    result.warnings = [f"{w.category.__name__}: {w.message}" for w in caught]
    return result, seconds


def error_line(result) -> re.Match:
    """The one FILE:LINE:COL: error: line on stderr (fails on anything else)."""
    assert "Traceback" not in result.stdout + result.stderr
    assert not result.warnings, f"warnings would print on stderr too: {result.warnings}"
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    match = LOCATED.fullmatch(lines[0])
    assert match, f"not a located error line: {lines[0]!r}"
    assert "internal error" not in match["message"]
    return match


@pytest.fixture(scope="module", autouse=True)
def warm_imports():
    """Import what the commands import lazily, so timings measure the work, not the imports."""
    invoke("check", str(FIXTURES[0]))


def test_invalid_fixtures_cover_at_least_thirty_cases():
    assert len(FIXTURES) >= 30
    assert set(BARE) <= {p.name for p in FIXTURES}


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_check_invalid_model_gives_one_located_error(path):
    line, col, exact, message = expectation(path)
    result, seconds = invoke("check", str(path))
    assert result.exit_code == 2, result.output
    error = error_line(result)
    assert error["path"] == str(path)
    assert (int(error["line"]), int(error["col"])) == (line, col), error["message"]
    if exact:
        assert error["message"] == message
    else:
        assert message in error["message"]
    assert seconds < SECONDS


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_analyze_json_invalid_model_prints_nothing_on_stdout(path):
    line, col, _, _ = expectation(path)
    result, seconds = invoke("analyze", str(path), "--format", "json")
    assert result.exit_code == 2
    assert result.stdout == ""
    error = error_line(result)
    assert (int(error["line"]), int(error["col"])) == (line, col)
    assert seconds < SECONDS


def test_check_non_utf8_fixture_really_is_not_utf8():
    with pytest.raises(UnicodeDecodeError):
        (INVALID / "non_utf8.yaml").read_bytes().decode("utf-8")


@pytest.mark.parametrize("save", [
    lambda path: np.savez(path, w=np.ones(3)), lambda path: np.save(path, np.ones(3)),
], ids=["npz", "npy"])
def test_a_weights_archive_given_as_the_model_says_so(tmp_path, save):
    path = tmp_path / "weights.bin"
    with open(path, "wb") as f:
        save(f)
    result, _ = invoke("check", str(path))
    assert result.exit_code == 2
    error = error_line(result)
    assert (error["line"], error["col"]) == ("1", "1")
    assert error["message"].startswith("this is a numpy or torch.save archive, not a model file")


def test_check_invalid_directory_gives_one_line_per_model_on_real_stderr():
    # A real process: anything that bypasses sys.stderr (warnings, C code) would show here.
    result = subprocess.run([sys.executable, "-m", "gradflow.cli.main", "check", str(INVALID)],
                            capture_output=True, text=True, timeout=60, cwd=INVALID.parents[2])
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    matches = [LOCATED.fullmatch(line) for line in lines]
    assert all(matches), lines
    models = {str(p) for p in FIXTURES if re.search(rb"^gradflow\s*:", p.read_bytes(), re.M)}
    assert sorted(m["path"] for m in matches) == sorted(models)


@pytest.mark.parametrize("dim, line, col, message", [
    ("nope=3", 3, 1, "--dim nope=3: the model has no dim 'nope' (it has batch, features)"),
    ("batc=3", 3, 1, "--dim batc=3: the model has no dim 'batc' (did you mean 'batch'?)"),
    ("batch=0", 4, 10, "--dim batch=0: a dim must be a positive integer"),
    ("batch=-4", 4, 10, "--dim batch=-4: a dim must be a positive integer"),
    ("batch=1000000000000000", 7, 14, "input 'x' has shape [1000000000000000, 8]"),
])
@pytest.mark.parametrize("command", ["check", "analyze"])
def test_dim_override_error_points_into_the_file(write_model, command, dim, line, col, message):
    path = write_model(VALID)
    result, seconds = invoke(command, path, "--dim", dim)
    assert result.exit_code == 2
    error = error_line(result)
    assert (error["path"], int(error["line"]), int(error["col"])) == (path, line, col)
    assert error["message"].startswith(message)
    assert seconds < SECONDS


def test_a_dim_expression_that_only_the_flags_break_names_the_flags(write_model):
    path = write_model(VALID.replace("  features: 8\n", "  features: 8\n  half: features // 2\n"))
    result, _ = invoke("check", path, "--dim", "features=1")
    error = error_line(result)
    assert (int(error["line"]), int(error["col"])) == (6, 9)     # at the expression
    assert error["message"] == ("dims: dim 'half' = features // 2: a dim must be a positive integer, got 0 "
                                "(with --dim features=1)")


@pytest.mark.parametrize("dim", ["batch", "batch=x", "=3", "batch=2.5"])
def test_dim_override_malformed_is_usage_error(write_model, dim):
    result, _ = invoke("check", write_model(VALID), "--dim", dim)
    assert result.exit_code == 2
    assert "Traceback" not in result.stdout + result.stderr
    assert "Invalid value for '--dim'" in result.stderr
    assert "expected NAME=INT," in result.stderr


def test_dim_override_valid_model_passes(write_model):
    result, _ = invoke("check", write_model(VALID), "--dim", "batch=4")
    assert result.exit_code == 0, result.output
