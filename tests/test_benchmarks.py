"""The benchmarks compare like with like: each side of a figure computes what the other does.
Their timings are never asserted; what they time is, here, on small sizes."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import gradflow
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))   # the scripts import their common module by name

import engine as engine_bench  # noqa: E402
import scale  # noqa: E402
import whole_path  # noqa: E402


@pytest.fixture
def model_of(write_model):
    def load(text: str):
        return gradflow.load(write_model(text))
    return load


@pytest.mark.parametrize("n", [1, 2, 3, 31])
def test_the_tiny_chain_is_the_same_chain_on_every_side(model_of, n):
    model = model_of(whole_path.chain_yaml(n))
    model.materialize()
    x0, w0 = model.params["x"].value, np.full((4, 4), 0.9)
    expected = whole_path.numpy_chain(n, x0, w0)
    assert np.allclose(gradflow.analyze(model).grad("x", "loss"), expected, rtol=1e-12, atol=0)
    assert np.allclose(whole_path.tape_chain(n, x0, w0), expected, rtol=1e-12, atol=0)
    kinds = engine_bench.chain_kinds(n)
    assert np.allclose(engine_bench.tape_chain(kinds, x0, w0), engine_bench.numpy_chain(kinds, x0, w0),
                       rtol=1e-12, atol=0)


def test_the_mlp_file_is_the_network_numpy_runs(model_of):
    layers, width, batch = 3, 8, 4
    model = model_of(whole_path.mlp_yaml(layers, width, batch))
    report = gradflow.analyze(model)
    grads = whole_path.numpy_mlp(layers, width, batch, "float64", 0)
    names = [name for i in range(layers) for name in (f"w{i}", f"b{i}")]
    assert list(model.params) == names
    assert [report.grad(name, "loss").shape for name in names] == [g.shape for g in grads]
    # The same arithmetic on the model's own values gives the model's gradients.
    x0 = model.inputs["x"].value
    weights = [(model.params[f"w{i}"].value, model.params[f"b{i}"].value) for i in range(layers)]
    for name, g in zip(names, engine_bench.numpy_mlp(x0, weights)):
        assert np.allclose(report.grad(name, "loss"), g, rtol=1e-10, atol=1e-15)


def test_the_stops_model_has_a_stop_per_branch_each_with_a_cut_norm(model_of):
    report = gradflow.analyze(model_of(scale.stops_yaml(5)))
    explicit = [s for s in report.stops if s.cut.kind == "explicit"]
    assert len(explicit) == 5
    assert all(s.cuts["loss"]["cut_norm"] > 0 for s in explicit)


def test_the_long_chain_has_the_nodes_it_is_named_for(model_of):
    model = model_of(scale.chain_yaml(50))
    assert len(model.tape.nodes) == 50
    assert gradflow.analyze(model).status("w", "loss") == "flows"
