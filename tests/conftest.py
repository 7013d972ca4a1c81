"""Shared fixtures: write a model file into a temporary folder."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"


@pytest.fixture
def write_model(tmp_path):
    """write_model(text, name="m.yaml") -> path of a model file holding the dedented text."""
    def write(text: str, name: str = "m.yaml") -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return str(path)
    return write
