"""Importers: models written in other frameworks -> gradflow model documents.

``FILE.py:FUNC`` names a PyTorch training step. The torch importer lives in its
own package, the only place in gradflow that imports torch; this module only
recognises such targets and says how to install torch when it is missing.
"""

from __future__ import annotations

import importlib.util
import re

from gradflow.errors import ModelError

TARGET = re.compile(r"(?P<file>.+\.py):(?P<func>[A-Za-z_][A-Za-z0-9_]*)\Z")


def is_python_target(path) -> bool:
    """True for ``FILE.py:FUNC`` (and a bare ``FILE.py``, so it gets a helpful error)."""
    text = str(path)
    return bool(TARGET.match(text)) or text.endswith(".py")


def import_python(target: str):
    """Import the training step ``FILE.py:FUNC`` into an ``Imported`` document."""
    match = TARGET.match(str(target))
    if match is None:
        raise ModelError("a Python model is named FILE.py:FUNC, the function that returns the "
                         "training step (e.g. train.py:gan_step)", str(target), 1, 1)
    if importlib.util.find_spec("torch") is None:
        raise ModelError("importing a PyTorch model needs torch: pip install 'gradflow[torch]'",
                         match["file"], 1, 1)
    from gradflow.importers.torch import capture_target
    return capture_target(match["file"], match["func"])
