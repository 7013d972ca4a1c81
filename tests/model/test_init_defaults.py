"""Defaults of parameters without `init`: a gain (layer_norm's gamma) starts at ones, as in
PyTorch, so it does not silently zero every gradient that passes through it."""

from __future__ import annotations

import numpy as np

import gradflow
from gradflow.engine import OPS

LAYER_NORM_MODEL = """
    gradflow: 1
    inputs:
      x: {shape: [4, 8]}
    params:
      w: {shape: [8, 8]}
      gamma: {shape: [8]}
      beta: {shape: [8]}
      scale: {shape: [8]}
    modules:
      block:
        inputs: [h]
        params:
          g: {shape: [8]}
          b: {shape: [8]}
        graph:
          y: layer_norm(h, g, b)
        output: y
    graph:
      h: layer_norm(x @ w, gamma, beta)
      s: block(h) * scale
      again: layer_norm(s, scale, beta)
      loss: mean(square(again))
    losses: [loss]
"""


def test_layer_norm_gain_defaults_to_ones_and_its_shift_to_zeros(write_model):
    model = gradflow.load(write_model(LAYER_NORM_MODEL))
    assert model.inits["gamma"] == ("ones", ()) and model.inits["block.g"] == ("ones", ())
    assert model.inits["beta"] == ("zeros", ()) and model.inits["block.b"] == ("zeros", ())


def test_a_parameter_first_used_elsewhere_keeps_zeros(write_model):
    model = gradflow.load(write_model(LAYER_NORM_MODEL))
    assert model.inits["scale"] == ("zeros", ())   # first use is `* scale`, a gain only later


def test_an_explicit_init_of_a_gain_is_kept(write_model):
    model = gradflow.load(write_model(LAYER_NORM_MODEL.replace("gamma: {shape: [8]}",
                                                               "gamma: {shape: [8], init: zeros}")))
    assert model.inits["gamma"] == ("zeros", ())


def test_gradient_flows_through_a_defaulted_layer_norm_gain(write_model):
    text = LAYER_NORM_MODEL.replace("s: block(h) * scale", "s: block(h)").replace(
        "again: layer_norm(s, scale, beta)", "again: s")
    report = gradflow.analyze(gradflow.load(write_model(text)))
    assert report.status("w", "loss") == "flows"
    assert np.any(report.grad("w", "loss"))


def test_gains_are_marked_in_the_op_table():
    assert OPS["layer_norm"].gains == (OPS["layer_norm"].inputs.index("gamma"),)
    assert all(0 <= k < len(op.inputs) for op in OPS.values() for k in op.gains)


def test_every_gamma_input_of_the_op_table_is_marked_a_gain():
    # A norm op whose gamma is not marked would start it at zeros: every gradient through it 0.
    for op in OPS.values():
        if "gamma" in op.inputs:
            assert op.inputs.index("gamma") in op.gains, op.name
