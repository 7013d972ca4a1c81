"""Counterfactual norms (every explicit stop as the identity) and each stop's cut_norm.

The analysis gets both from sweeps that start at the stops; here they are checked
against the plain definition, a whole backward pass with the stops opened, and
against PyTorch with the detaches removed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import gradflow
from gradflow.analysis.flow import Graph
from tests.conftest import MODELS

NESTED = """
gradflow: 1
params:
  w: {value: 3.0}
  v: {value: 5.0}
graph:
  loss: stop_gradient(2 * stop_gradient(w)) * v
losses: [loss]
"""

SHIPPED = sorted(MODELS.glob("*.yaml")) + sorted((Path(__file__).parent.parent / "models" / "bugs").glob("*.yaml"))


def opened_norms(model, loss, through) -> dict:
    """Each parameter's gradient norm from a whole backward pass with ``through`` opened."""
    grads = model.tape.backward(loss, through=through)
    return {name: 0.0 if t.index >= len(grads) or grads[t.index] is None
            else float(np.linalg.norm(grads[t.index])) for name, t in model.params.items()}


def test_counterfactual_opens_a_stop_behind_another_stop(write_model):
    report = gradflow.analyze(gradflow.load(write_model(NESTED)))
    assert report.status("w", "loss") == "blocked"
    assert report.pair("w", "loss").counterfactual_norm == pytest.approx(10.0)   # d(2 w v)/dw = 2 v


@pytest.mark.torch
def test_counterfactual_of_nested_stops_matches_torch_without_detach(write_model):
    torch = pytest.importorskip("torch")
    w, v = torch.tensor(3.0, dtype=torch.float64, requires_grad=True), torch.tensor(5.0, dtype=torch.float64)
    (grad,) = torch.autograd.grad((2 * w) * v, w)
    report = gradflow.analyze(gradflow.load(write_model(NESTED)))
    assert report.pair("w", "loss").counterfactual_norm == pytest.approx(abs(grad.item()), rel=1e-12)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_counterfactual_norms_equal_a_whole_pass_through_every_stop(path):
    model = gradflow.load(path, dims={"batch": 4} if "batch" in path.read_text() else None)
    report = gradflow.analyze(model)
    stops = {c.index for c in Graph(model.tape, model.params).all_cuts() if c.kind == "explicit"}
    for loss_name, loss in model.losses.items():
        want = opened_norms(model, loss, stops)
        for name in model.params:
            got = report.pair(name, loss_name).counterfactual_norm
            assert got == pytest.approx(want[name], rel=1e-9, abs=1e-12), (loss_name, name)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_cut_norm_equals_the_difference_of_two_whole_passes(path):
    model = gradflow.load(path, dims={"batch": 4} if "batch" in path.read_text() else None)
    report = gradflow.analyze(model)
    checked = 0
    for stop in report.stops:
        for loss_name, cut in stop.cuts.items():
            if cut["cut_norm"] is None:
                continue
            loss = model.losses[loss_name]
            plain, opened = model.tape.backward(loss), model.tape.backward(loss, through={stop.cut.index})
            total = 0.0
            for t in model.params.values():
                a = opened[t.index] if t.index < len(opened) else None
                b = plain[t.index] if t.index < len(plain) else None
                total += float(np.sum(np.square((0 if a is None else a) - (0 if b is None else b))))
            assert cut["cut_norm"] == pytest.approx(total ** 0.5, rel=1e-9, abs=1e-12)
            checked += 1
    explicit = [s for s in report.stops if s.cut.kind == "explicit" and not s.redundant]
    assert checked >= len(explicit)


def test_cut_norms_stay_within_a_budget_of_passes_over_the_tape(write_model, monkeypatch):
    from gradflow.analysis import analyze as analyze_module
    lines = ["gradflow: 1", "params:", "  w: {shape: [4], init: ones}", "graph:", "  h0: w"]
    lines += [f"  h{i + 1}: tanh(h{i}) + stop_gradient(h{i})" for i in range(40)]
    lines += ["  loss: sum(h40)", "losses: [loss]"]
    path = write_model("\n".join(lines) + "\n")
    full = [s.cuts["loss"]["cut_norm"] for s in gradflow.analyze(gradflow.load(path)).stops]
    assert all(n is not None for n in full)
    monkeypatch.setattr(analyze_module, "CUT_NORM_PASSES", 3)
    bounded = [s.cuts["loss"]["cut_norm"] for s in gradflow.analyze(gradflow.load(path)).stops]
    computed = [n for n in bounded if n is not None]
    assert 0 < len(computed) < len(bounded)          # the rest is left out, not computed slowly
    assert computed == [n for n, b in zip(full, bounded) if b is not None]


BRANCHES = """
gradflow: 1
dims: {batch: 4, width: 3}
inputs:
  x: {shape: [batch, width]}
params:
  head: {shape: [width, width]}
  w0: {shape: [width, width]}
  w1: {shape: [width, width]}
graph:
  base: tanh(x @ head)
  b0: tanh(base @ w0) + stop_gradient(tanh(base @ w0))
  b1: tanh(base @ w1) + stop_gradient(base * 2)
  loss: mean(b0 + b1)
losses: [loss]
"""


@pytest.mark.parametrize("text", [BRANCHES, NESTED])
def test_counterfactual_from_the_stops_own_sweeps_equals_the_one_sweep_through_every_stop(
        write_model, monkeypatch, text):
    from gradflow.analysis import analyze as analyze_module
    model = gradflow.load(write_model(text))
    summed = gradflow.analyze(model)
    monkeypatch.setattr(analyze_module, "CUT_NORM_PASSES", 0)   # no stop swept: one sweep through all
    opened = gradflow.analyze(model)
    for name in model.params:
        got, want = summed.pair(name, "loss").counterfactual_norm, opened.pair(name, "loss").counterfactual_norm
        assert got == pytest.approx(want, rel=1e-12, abs=1e-15), name
