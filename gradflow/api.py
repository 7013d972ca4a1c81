"""The calls of the Python API (load, analyze, check), behind the lazy names of ``gradflow/__init__.py``."""

from __future__ import annotations

import os

from gradflow import __version__
from gradflow.analysis.analyze import analyze as _analyze
from gradflow.analysis.report import Report
from gradflow.analysis.settings import Settings, SettingsError, settings_for
from gradflow.errors import ModelError
from gradflow.importers import is_python_target
from gradflow.model.build import build
from gradflow.model.built import Model
from gradflow.model.load import load_spec


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


def load_weights(model: Model, path) -> None:
    """--weights: imported only when given (zipfile and the decompressors take milliseconds to load)."""
    from gradflow.model.weights import load_weights as read_into
    read_into(model, path)


def load_python(target: str, dims, seed, weights, dtype) -> Model:
    from gradflow.importers import at_python_line, import_python
    imported = import_python(target)
    text = imported.to_yaml()
    try:
        spec = load_spec(target, text)
        spec.step = True
        model = build(spec, dims=dims, seed=seed, dtype=dtype)
        model.weights.update(imported.arrays)
        if weights is not None:
            load_weights(model, weights)
    except ModelError as e:   # of the model file made from the step, which the user never saw
        if e.path != target:
            raise
        raise at_python_line(e, text, imported.source) from None
    return model


def analyze(model: Model, structural: bool = False, counterfactual: bool = True, settings=None) -> Report:
    """Report, for every parameter and loss, whether gradient flows and if not, why.

    ``settings`` is a mapping like a model file's ``check:`` block (``{"ignore": ["GF106"],
    "strict": True}``), applied over pyproject.toml and the file's own block; a bad key or
    value raises ValueError.
    """
    if settings is not None and not isinstance(settings, Settings):
        try:
            settings = settings_for(model, dict(settings))
        except SettingsError as e:
            raise ValueError(e.message) from None
    return _analyze(model, structural=structural, counterfactual=counterfactual,
                    settings=settings, version=__version__)


def check(paths, settings=None, dims: dict | None = None, seed: int | None = None,
          structural: bool = False):
    """Check model files and directories (every *.yaml/*.yml model in them, recursively) as
    `gradflow check` does, into a ``CheckRun``; ``settings`` as for ``analyze``."""
    from gradflow.checkrun import CheckResult, CheckRun
    from gradflow.cli.discover import model_files   # reads files only: no click, no rich
    items, _ = model_files([paths] if isinstance(paths, (str, os.PathLike)) else paths)
    run = CheckRun()
    for item in items:
        if isinstance(item, ModelError):
            run.results.append(CheckResult(item.path, error=item))
            continue
        try:
            model = load(item, dims=dims, seed=seed)
            run.results.append(CheckResult(str(item), analyze(model, structural=structural,
                                                              settings=settings or {})))
        except ModelError as e:
            run.results.append(CheckResult(str(item), error=e))
    return run
