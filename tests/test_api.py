"""The Python API of the specification: load, analyze, Report, ModelError."""

from __future__ import annotations

import numpy as np
import pytest

import gradflow
from tests.conftest import MODELS


def test_api_load_and_analyze_tape_example():
    model = gradflow.load(MODELS / "stop_gradient_tape.yaml")
    report = gradflow.analyze(model)
    assert report.status("x", "z") == "flows"
    assert report.status("y", "z") == "blocked"
    assert float(report.grad("x", "z")) == pytest.approx(7.0)
    assert report.grad("y", "z") is None
    assert report.to_dict()["params"][1]["grads"]["z"]["cut_by"][0]["op"] == "stop_gradient"


def test_api_structural_mode_has_statuses_and_no_numbers():
    report = gradflow.analyze(gradflow.load(MODELS / "stop_gradient_tape.yaml"), structural=True)
    assert report.status("x", "z") == "flows"
    assert report.grad("x", "z") is None
    assert report.to_dict()["params"][0]["grads"]["z"]["norm"] is None
    assert report.to_dict()["losses"][0]["value"] is None


def test_api_dims_and_seed_overrides(write_model):
    path = write_model("""
        gradflow: 1
        dims: {n: 3}
        params:
          w: {shape: [n], init: normal}
        graph:
          loss: sum(w * w)
        losses: [loss]
    """)
    small = gradflow.load(path, dims={"n": 5}, seed=1)
    assert small.params["w"].shape == (5,)
    a = gradflow.analyze(gradflow.load(path, seed=1)).grad("w", "loss")
    b = gradflow.analyze(gradflow.load(path, seed=2)).grad("w", "loss")
    assert not np.allclose(a, b)
    np.testing.assert_allclose(a, gradflow.analyze(gradflow.load(path, seed=1)).grad("w", "loss"))


def test_api_model_error_carries_its_place(write_model):
    path = write_model("""
        gradflow: 1
        graph:
          z: foo + 1
        losses: [z]
    """)
    with pytest.raises(gradflow.ModelError) as caught:
        gradflow.load(path)
    e = caught.value
    assert (e.path, e.line, e.col) == (path, 3, 6)
    assert "undefined name 'foo'" in e.message


def test_api_unknown_pair_raises_key_error():
    report = gradflow.analyze(gradflow.load(MODELS / "stop_gradient_tape.yaml"))
    with pytest.raises(KeyError):
        report.status("nope", "z")
    with pytest.raises(KeyError):
        report.status("x", "nope")
