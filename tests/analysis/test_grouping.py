"""Root causes first: findings that share one cause are one finding listing what it affects."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import gradflow
from gradflow.analysis.report import collapse

BUGS = Path(__file__).resolve().parent.parent / "models" / "bugs"

# Four transformer-ish blocks whose layer_norm gain is (wrongly) initialised to zero:
# every parameter before it receives exactly zero gradient, for one reason.
ZERO_GAIN = """
gradflow: 1
dims: {d: 4}
inputs:
  x: {shape: [3, d]}
modules:
  block:
    inputs: [h]
    params:
      w: {shape: [d, d]}
      b: {shape: [d]}
    graph:
      y: tanh(h @ w + b)
    output: y
params:
  gain: {shape: [d], init: zeros}
  shift: {shape: [d]}
graph:
  h: repeat(block, x, times=4)
  loss: sum(layer_norm(h, gain, shift))
losses: [loss]
"""


def test_one_misplaced_stop_is_one_finding_per_rule():
    report = gradflow.analyze(gradflow.load(BUGS / "gan_stopped_discriminator_output.yaml"))
    per_rule = Counter(f.rule for f in report.findings)
    assert per_rule == {"GF100": 1, "GF102": 1, "GF103": 1, "GF110": 1}
    [gf103] = [f for f in report.findings if f.rule == "GF103"]
    assert gf103.params == ["G.w1", "G.b1", "G.w2"]
    assert gf103.message.startswith("stop_gradient in g_loss (line 47:26) blocks G.w1, G.b1 and G.w2 from g_loss")
    assert gf103.command.startswith("gradflow why ") and gf103.command.endswith(" G.w1 --loss g_loss")


def test_gf102_shows_the_path_from_the_loss_meant_to_train_them_not_an_intended_block():
    # d_loss comes first and blocks G on purpose (G is outside its wrt); g_loss should train G.
    report = gradflow.analyze(gradflow.load(BUGS / "gan_stopped_discriminator_output.yaml"))
    [gf102] = [f for f in report.findings if f.rule == "GF102"]
    assert list(report.by_name["G.w1"].grads) == ["d_loss", "g_loss"]
    assert gf102.command.endswith(" G.w1 --loss g_loss")


def test_a_zero_gain_is_one_warning_naming_where_the_gradient_dies(write_model):
    report = gradflow.analyze(gradflow.load(write_model(ZERO_GAIN)))
    zero = [f for f in report.findings if f.rule == "GF107"]
    assert len(zero) == 1
    assert len(zero[0].params) == 8 and "layer_norm in loss" in zero[0].message
    assert "block.{0..3}.w" in zero[0].message     # repeated instances collapse in messages


def test_json_keeps_one_entry_per_cause_with_its_pairs(write_model):
    doc = gradflow.analyze(gradflow.load(write_model(ZERO_GAIN))).to_dict()
    [entry] = [f for f in doc["findings"] if f["rule"] == "GF107"]
    assert entry["param"] is None and entry["loss"] == "loss"
    assert entry["params"] == [f"block.{i}.{p}" for i in range(4) for p in "wb"]


def test_collapse_joins_contiguous_instances_only():
    assert collapse(["block.0.w", "block.1.w", "block.2.w", "x"]) == ["block.{0..2}.w", "x"]
    assert collapse(["G.0.weight", "G.2.weight"]) == ["G.0.weight", "G.2.weight"]
    assert collapse(["a.1.w", "a.0.w"]) == ["a.1.w", "a.0.w"]
