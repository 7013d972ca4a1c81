"""Importers: models written in other frameworks -> gradflow model documents.

``FILE.py:FUNC`` names a PyTorch training step. The torch importer lives in its
own package, the only place in gradflow that imports torch; this module only
recognises such targets and says how to install torch when it is missing.
"""

from __future__ import annotations

import importlib.util
import re

from gradflow.errors import ModelError

# Compiled on first use: the path of a YAML model never needs it.
TARGET = r"(?P<file>.+\.py):(?P<func>[A-Za-z_][A-Za-z0-9_]*)\Z"
# What is meant as one: a bare FILE.py, or FILE.py: followed by no name or a bad one.
MEANT = r"(?P<file>.+\.py)(?::[^/]*)?\Z"


def is_python_target(path) -> bool:
    """True for ``FILE.py:FUNC`` (and ``FILE.py`` or ``FILE.py:`` with no function or a bad
    one, so they get a helpful error rather than a file that is not there)."""
    text = str(path)
    return text.endswith(".py") or ".py:" in text and not text.endswith((".yaml", ".yml")) \
        and re.match(MEANT, text) is not None


def import_python(target: str):
    """Import the training step ``FILE.py:FUNC`` into an ``Imported`` document."""
    match = re.match(TARGET, str(target))
    if match is None:
        meant = re.match(MEANT, str(target))
        raise ModelError("a Python model is named FILE.py:FUNC, the function that returns the "
                         "training step (e.g. train.py:gan_step)", meant["file"] if meant else str(target), 1, 1)
    if importlib.util.find_spec("torch") is None:
        raise ModelError("importing a PyTorch model needs torch: pip install 'gradflow[torch]'",
                         match["file"], 1, 1)
    from gradflow.importers.torch import capture_target
    return capture_target(match["file"], match["func"])


def at_python_line(error: ModelError, text: str, step) -> ModelError:
    """An error in the model file made from a Python step (``text``), moved to the Python line
    that file's line came from: its entry's ``source:``, else FUNC's def line (``step``)."""
    import json

    from gradflow.importers.torch.places import display
    lines = text.splitlines()
    line = lines[error.line - 1] if error.line and 0 < error.line <= len(lines) else ""
    match = re.search(r'source: ("(?:[^"\\]|\\.)*")', line)    # written by quote(): JSON's escapes
    if match is None:
        return ModelError(error.message, display(step.path), step.line, step.col)
    path, row, col = json.loads(match[1]).rsplit(":", 2)
    return ModelError(error.message, display(path), int(row), int(col))
