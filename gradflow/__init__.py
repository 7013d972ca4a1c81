"""gradflow: which parameters does each loss train, and if not, why not.

    import gradflow
    model = gradflow.load("models/gan.yaml", dims={"batch": 4}, seed=0)
    report = gradflow.analyze(model)
    report.status("G.w1", "g_loss")      # "flows"
"""

from __future__ import annotations

__version__ = "0.1.0"

from gradflow.analysis.analyze import analyze as _analyze  # noqa: E402
from gradflow.analysis.report import Finding, Report  # noqa: E402
from gradflow.errors import ModelError  # noqa: E402
from gradflow.model.build import Model, build  # noqa: E402
from gradflow.model.load import load_spec  # noqa: E402
from gradflow.model.weights import load_weights  # noqa: E402


def load(path, dims: dict | None = None, seed: int | None = None, weights=None,
         dtype="float64") -> Model:
    """Read, check and build a model file (shapes only: no array is allocated yet)."""
    model = build(load_spec(path), dims=dims, seed=seed, dtype=dtype)
    if weights is not None:
        load_weights(model, weights)
    return model


def analyze(model: Model, structural: bool = False, counterfactual: bool = True, settings=None) -> Report:
    """Report, for every parameter and loss, whether gradient flows and if not, why."""
    return _analyze(model, structural=structural, counterfactual=counterfactual,
                    settings=settings, version=__version__)


__all__ = ["Finding", "Model", "ModelError", "Report", "__version__", "analyze", "load"]
