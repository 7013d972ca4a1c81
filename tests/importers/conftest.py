"""Helpers for importer tests: write a training-step file and find lines in it by marker."""

from __future__ import annotations

import textwrap

import pytest


@pytest.fixture
def step_file(tmp_path):
    """write(body) -> (path, line_of): the file, and the 1-based line holding a '# @marker' comment."""
    def write(body: str, name: str = "step.py"):
        text = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n" + textwrap.dedent(body)
        path = tmp_path / name
        path.write_text(text)
        lines = text.splitlines()

        def line_of(marker: str) -> int:
            return next(i for i, line in enumerate(lines, 1) if line.rstrip().endswith(f"# @{marker}"))
        return str(path), line_of
    return write
