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


def test_model_and_report_show_as_one_line_in_a_notebook():
    model = gradflow.load(MODELS / "gan.yaml")
    shown = repr(model)
    assert shown.startswith("<Model 'gan' from ") and shown.endswith("gan.yaml: 6 parameters (176 values), "
                                                                    "37 nodes, losses d_loss, g_loss>")
    report = gradflow.analyze(model, structural=True)
    assert repr(report) == "<Report of 'gan' (structural): 6 parameters, 2 losses, 0 errors, 0 warnings>"
    assert "\n" not in shown and "object at 0x" not in shown


def test_a_name_that_differs_only_in_case_is_suggested(write_model):
    report = gradflow.analyze(gradflow.load(write_model(
        "gradflow: 1\nparams:\n  w: {shape: [3]}\ngraph:\n  loss: sum(w)\nlosses:\n  loss: {wrt: [W]}\n")))
    assert [f.message for f in report.findings if f.rule == "GF101"] == [
        "loss: wrt 'W' matches no parameter (did you mean 'w'?)"]


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


def test_dir_lists_the_public_names():
    names = dir(gradflow)
    for name in ("load", "analyze", "check", "Report", "Finding", "ModelError", "CheckRun"):
        assert name in names
    assert "importlib" not in names and "annotations" not in names


def test_analyze_takes_settings_as_a_plain_mapping():
    model = gradflow.load(MODELS / "gan.yaml")
    report = gradflow.analyze(model, settings={"ignore": ["GF104"], "strict": True})
    assert report.settings.strict and report.settings.severity("GF104") == "off"
    with pytest.raises(ValueError, match="did you mean 'GF104'"):
        gradflow.analyze(model, settings={"ignore": ["GF1O4"]})


def test_check_returns_results_per_file_and_the_exit_code():
    run = gradflow.check(MODELS)
    assert run.exit_code == 0 and len(run.results) == len(list(MODELS.glob("*.yaml")))
    bugs = gradflow.check([MODELS.parent / "tests" / "models" / "bugs"])
    assert bugs.exit_code == 1 and all(r.failed for r in bugs.results)
    assert gradflow.check([]).exit_code == 2   # nothing checked is not a pass


def test_model_error_has_its_place():
    with pytest.raises(gradflow.ModelError) as e:
        gradflow.load(MODELS.parent / "tests" / "models" / "invalid" / "string_dim.yaml")
    assert (e.value.line, e.value.col) == (6, 10) and e.value.path.endswith("string_dim.yaml")
    assert "unknown dim 'x'" in e.value.message


def test_named_values_are_held_where_the_forward_reuses_buffers(write_model, monkeypatch):
    import gradflow.engine.tape as tape_module
    monkeypatch.setattr(tape_module, "REUSE_BYTES", 0)
    model = gradflow.load(write_model("gradflow: 1\ninputs:\n  x: {shape: [4, 3]}\nparams:\n  w: {shape: [3, 3]}\n"
                                      "  b: {shape: [3]}\ngraph:\n  m: x @ w\n  h: tanh(m + b) + b\n"
                                      "  loss: sum(h)\nlosses: [loss]\n"))
    gradflow.analyze(model)
    x, w, b = (model.inputs["x"].value, model.params["w"].value, model.params["b"].value)
    np.testing.assert_array_equal(model.entries["m"].value, x @ w)
    np.testing.assert_array_equal(model.entries["h"].value, np.tanh(x @ w + b) + b)
    dropped = [n.op.name for n in model.tape.nodes if n.op is not None and n.value is None]
    assert dropped == ["add"]      # m + b, inside h's expression: tanh wrote over it
