"""Names with integer segments, frozen parameters, and source places in a model file."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

import gradflow
from gradflow.cli.main import cli
from gradflow.errors import ModelError
from gradflow.model.expr import INTEGER_SEGMENT_NAME, spell_integer_segments

SEGMENTS = """
gradflow: 1
inputs:
  x: {shape: [2, 3]}
params:
  G.0.weight: {shape: [3, 4]}
  G.0.bias: {shape: [4]}
  blocks.3.attn.qkv.weight: {shape: [4, 1]}
graph:
  h: relu(x @ G.0.weight + G.0.bias)
  loss: mean(h @ blocks.3.attn.qkv.weight)
losses: [loss]
"""

FROZEN = """
gradflow: 1
inputs:
  x: {shape: [2, 3]}
params:
  enc.w: {shape: [3, 4], frozen: true}
  head.w: {shape: [4, 1]}
graph:
  z: tanh(x @ enc.w)
  loss: mean(z @ head.w)
losses:
  loss: {wrt: [head.*]}
"""

SOURCED = """
gradflow: 1
source: "train.py:10:1"
params:
  w: {shape: [3], init: ones}
  v: {shape: [3], init: ones, source: "train.py:12:5"}
graph:
  a: {expr: "stop_gradient(w)", source: "train.py:42:17"}
  loss: {expr: "sum(a * v)", source: "train.py:43:9"}
losses:
  loss: {wrt: [w, v]}
"""


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_expression_refers_to_integer_segment_names_as_spelled(write_model):
    report = gradflow.analyze(gradflow.load(write_model(SEGMENTS)))
    assert [p.name for p in report.params] == ["G.0.weight", "G.0.bias", "blocks.3.attn.qkv.weight"]
    assert report.status("G.0.weight", "loss") == "flows"
    assert report.status("blocks.3.attn.qkv.weight", "loss") == "flows"


def test_integer_segments_are_respelled_outside_strings_only():
    assert spell_integer_segments('x @ G.0.weight + f(y, mode="a.0")') == 'x @ G_0.weight + f(y, mode="a.0")'
    assert spell_integer_segments("2.5 * a.b.3.c") == "2.5 * a.b_3.c"


@pytest.mark.parametrize("text", ["x @ w + b", "2.5 * a.b", "f(a.b, 'c.1')", "a.0", "a.٣", "a.²", "a . 1",
                                  "x1.y", "'a.1' + b.2", "G.0.w", ".5 + a", "a..1", "a.b.c"])
def test_integer_segments_are_respelled_as_the_whole_scan_respells_them(text):
    def whole_scan(match):   # every match of the pattern, without the early return for most texts
        return match.group(0) if match.group(1) else re.sub(r"\.(?=\d)", "_", match.group(0))
    assert spell_integer_segments(text) == INTEGER_SEGMENT_NAME.sub(whole_scan, text)


def test_undefined_integer_segment_name_points_at_its_column(write_model):
    path = write_model("gradflow: 1\nparams:\n  w: {shape: [3]}\ngraph:\n  loss: sum(w.0.x)\nlosses: [loss]\n")
    with pytest.raises(ModelError) as e:
        gradflow.load(path)
    assert (e.value.line, e.value.col) == (5, 13) and "'w.0.x'" in e.value.message


def test_weights_and_saved_gradients_use_integer_segment_names(write_model, tmp_path):
    path = write_model(SEGMENTS)
    weights = tmp_path / "w.npz"
    np.savez(weights, **{"G.0.bias": np.full(4, 0.5)})
    grads = tmp_path / "g.npz"
    result = run("analyze", path, "--weights", weights, "--save-grads", grads)
    assert result.exit_code == 0, result.output
    with np.load(grads) as saved:
        assert "loss/G.0.weight" in saved.files and "loss/blocks.3.attn.qkv.weight" in saved.files
    model = gradflow.load(path, weights=str(weights))
    model.materialize()
    assert np.all(model.params["G.0.bias"].value == 0.5)


def test_frozen_param_is_reported_but_never_trainable(write_model):
    report = gradflow.analyze(gradflow.load(write_model(FROZEN)))
    doc = report.to_dict()
    frozen = {p["name"]: p["frozen"] for p in doc["params"]}
    assert frozen == {"enc.w": True, "head.w": False}
    assert report.status("enc.w", "loss") == "flows"    # still analysed: gradient passes through it
    assert not [f for f in report.findings if f.param == "enc.w"]   # no GF104 although it flows


def test_frozen_param_blocked_everywhere_is_not_gf102(write_model):
    text = FROZEN.replace("tanh(x @ enc.w)", "tanh(x @ stop_gradient(enc.w))").replace(
        "losses:\n  loss: {wrt: [head.*]}", "losses: [loss]")
    report = gradflow.analyze(gradflow.load(write_model(text)))
    assert report.status("enc.w", "loss") == "blocked"
    assert [f.rule for f in report.findings if f.param == "enc.w"] == []


def test_frozen_param_in_wrt_is_an_error_naming_it(write_model):
    report = gradflow.analyze(gradflow.load(write_model(FROZEN.replace("wrt: [head.*]", "wrt: ['*']"))))
    [finding] = [f for f in report.findings if f.param == "enc.w"]
    assert finding.rule == "GF101" and "frozen" in finding.message and "enc.w" in finding.message


def test_frozen_params_one_glob_takes_into_wrt_are_one_error_naming_them_all(write_model):
    text = FROZEN.replace("wrt: [head.*]", "wrt: ['*']").replace(
        "  head.w:", "  enc.b: {shape: [4], frozen: true}\n  head.w:").replace("x @ enc.w", "x @ enc.w + enc.b")
    report = gradflow.analyze(gradflow.load(write_model(text)))
    [finding] = [f for f in report.findings if f.rule == "GF101"]
    assert finding.params == ["enc.w", "enc.b"]
    assert finding.message == ("loss: wrt '*' includes enc.w and enc.b, which are frozen (no optimizer updates "
                               "them): leave them out of wrt, or drop frozen: true")


def test_frozen_must_be_a_boolean(write_model):
    with pytest.raises(ModelError) as e:
        gradflow.load(write_model(FROZEN.replace("frozen: true", "frozen: yes please")))
    assert "frozen must be true or false" in e.value.message and e.value.line == 5


def test_cut_in_a_sourced_entry_points_at_the_python_line(write_model, tmp_path):
    path = write_model(SOURCED)
    doc = json.loads(run("analyze", path, "--format", "json").stdout)
    w = next(p for p in doc["params"] if p["name"] == "w")
    [cut] = w["grads"]["loss"]["cut_by"]
    assert (cut["file"], cut["line"], cut["col"]) == (str(tmp_path / "train.py"), 42, 17)


def test_findings_point_at_source_places_in_every_format(write_model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)            # paths inside the working directory are shown relative
    path = write_model(SOURCED)
    text = run("check", path)
    assert text.exit_code == 1
    assert "train.py:10:1: error:" in text.output          # GF103 on the wrt glob: the def line
    assert "stop_gradient in a (train.py:42:17)" in text.output
    github = run("check", path, "--format", "github").output
    assert "file=train.py,line=10,col=1" in github
    sarif = json.loads(run("check", path, "--format", "sarif").output)
    locations = [r["locations"][0]["physicalLocation"] for r in sarif["runs"][0]["results"]]
    assert {"train.py"} == {loc["artifactLocation"]["uri"] for loc in locations}
    junit = run("check", path, "--format", "junit").output
    assert "train.py:10:1:" in junit


@pytest.mark.parametrize("value", ['"train.py"', '"train.py:0:3"', "12", '"train.py:x:1"'])
def test_malformed_source_is_a_located_error(write_model, value):
    with pytest.raises(ModelError) as e:
        gradflow.load(write_model(SOURCED.replace('"train.py:12:5"', value)))
    assert "source must be PATH:LINE:COL" in e.value.message and e.value.line == 5


def test_source_paths_outside_the_working_directory_stay_absolute(write_model, tmp_path, monkeypatch):
    elsewhere = tmp_path / "sub"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    model = gradflow.load(write_model(SOURCED))
    assert model.sources["v"].file == str(tmp_path / "train.py")
