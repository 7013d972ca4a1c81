"""Shared fixtures: the same terminal environment wherever the tests run, and a model file
written into a temporary folder."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"

# The head of a model with one residual block module, for tests of calls, repeat and why.
BLOCK = """
gradflow: 1
dims: {d: 4}
inputs:
  x: {shape: [2, d]}
modules:
  block:
    inputs: [h]
    params:
      w: {shape: [d, d]}
    graph:
      out: h + tanh(h @ w)
    output: out
"""


@pytest.fixture
def write_model(tmp_path):
    """write_model(text, name="m.yaml") -> path of a model file holding the dedented text."""
    def write(text: str, name: str = "m.yaml") -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return str(path)
    return write


@pytest.fixture(autouse=True)
def same_terminal_everywhere(monkeypatch):
    """What gradflow prints follows FORCE_COLOR, NO_COLOR, COLUMNS and TERM; a runner that sets
    them (FORCE_COLOR=1 or a dumb TERM are common in CI) must not change what the tests see.
    A test that wants one of them passes it itself."""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR", "COLUMNS", "LINES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")
