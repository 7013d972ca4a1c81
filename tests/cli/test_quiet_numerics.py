"""numpy's warnings never reach stderr: log of 0 and of negatives, 0 ** -1, overflow,
float32. NaN and overflow are findings (GF105)."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
from click.testing import CliRunner

from gradflow.cli.main import cli
from tests.conftest import ROOT

NOISY = """
    gradflow: 1
    inputs:
      x: {shape: [2, 3]}
    params:
      w: {shape: [4], value: [-1.0, 0.0, 1.0, 4.0]}
      v: {shape: [3], value: [1.0e+30, 1.0e+30, -2.0]}
    graph:
      a: sum(log(w) * sqrt(w))
      b: sum(w ** -1.0) + sum(v * v * v * v) + sum(w ** v[2]) + sum(v ** w[0])
      c: sum(v ** 0.5) + var(v * v * v)
      d: sum(norm(x * v[0], axis=1)) + sum(exp(v)) + max(log(w))
      loss: a + b + c + d
    losses: [loss]
"""

COMMANDS = [
    ["analyze", "{m}"], ["analyze", "{m}", "--dtype", "float32"], ["analyze", "{m}", "--format", "json"],
    ["analyze", "{m}", "--format", "markdown"], ["check", "{m}"], ["check", "{m}", "--format", "sarif"],
    ["why", "{m}", "w"], ["why", "{m}", "v", "--dtype", "float32"], ["graph", "{m}"], ["gradcheck", "{m}"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:1] + c[2:]))
def test_command_on_nonfinite_numbers_writes_nothing_to_stderr(write_model, command):
    path = write_model(NOISY)
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # any warning that escapes becomes an internal error
        result = CliRunner().invoke(cli, [c.format(m=path) for c in command])
    assert result.stderr == ""
    assert result.exit_code in (0, 1), result.output
    assert "internal error" not in result.output


def test_gradcheck_on_nonfinite_numbers_is_silent_in_a_real_process(write_model):
    path = write_model(NOISY)
    done = subprocess.run([sys.executable, "-m", "gradflow.cli.main", "gradcheck", path],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode in (0, 1)
    assert done.stderr == ""
    assert done.stdout
