"""The two calls of the Python API, behind the lazy names of ``gradflow/__init__.py``."""

from __future__ import annotations

from gradflow import __version__
from gradflow.analysis.analyze import analyze as _analyze
from gradflow.analysis.report import Report
from gradflow.importers import is_python_target
from gradflow.model.build import Model, build
from gradflow.model.load import load_spec
from gradflow.model.weights import load_weights


def load(path, dims: dict | None = None, seed: int | None = None, weights=None,
         dtype="float64") -> Model:
    """Read, check and build a model file (shapes only: no array is allocated yet).

    ``FILE.py:FUNC`` imports a PyTorch training step instead (running FILE.py),
    with its real parameter values and example inputs.
    """
    if is_python_target(path):
        return load_python(str(path), dims, seed, weights, dtype)
    model = build(load_spec(path), dims=dims, seed=seed, dtype=dtype)
    if weights is not None:
        load_weights(model, weights)
    return model


def load_python(target: str, dims, seed, weights, dtype) -> Model:
    from gradflow.importers import import_python
    imported = import_python(target)
    model = build(load_spec(target, imported.to_yaml()), dims=dims, seed=seed, dtype=dtype)
    model.weights.update(imported.arrays)
    if weights is not None:
        load_weights(model, weights)
    return model


def analyze(model: Model, structural: bool = False, counterfactual: bool = True, settings=None) -> Report:
    """Report, for every parameter and loss, whether gradient flows and if not, why."""
    return _analyze(model, structural=structural, counterfactual=counterfactual,
                    settings=settings, version=__version__)
