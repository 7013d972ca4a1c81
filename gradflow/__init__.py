"""gradflow: which parameters does each loss train, and if not, why not.

    import gradflow
    model = gradflow.load("models/gan.yaml", dims={"batch": 4}, seed=0)
    report = gradflow.analyze(model)
    report.status("G.w1", "g_loss")      # "flows"

The public names are imported on first use, so `gradflow --version` and
`gradflow schema` start without numpy, PyYAML or the analysis.
"""

from __future__ import annotations

import importlib

from gradflow.errors import ModelError

__version__ = "0.1.0"

# public name -> the module that defines it
_LAZY = {"load": "gradflow.api", "analyze": "gradflow.api", "check": "gradflow.api",
         "CheckResult": "gradflow.checkrun", "CheckRun": "gradflow.checkrun",
         "Report": "gradflow.analysis.report", "Finding": "gradflow.analysis.report",
         "Model": "gradflow.model.build"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gradflow' has no attribute {name!r}")


__all__ = ["CheckResult", "CheckRun", "Finding", "Model", "ModelError", "Report", "__version__", "analyze",
           "check", "load"]


def __dir__() -> list:
    """The public names, including those loaded on first use."""
    return sorted(__all__)
