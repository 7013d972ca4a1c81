"""Static arguments given as strings: only an op's mode argument (gelu's approximate) takes one."""

from __future__ import annotations

import numpy as np
import pytest

import gradflow
from gradflow.errors import ModelError

MODEL = """
gradflow: 1
inputs:
  x: {{shape: [4], value: [-1.5, -0.2, 0.3, 2.0]}}
graph:
  y: {expr}
  loss: sum(y)
losses: [loss]
"""


def test_attrs_gelu_approximate_none_is_the_exact_form(write_model):
    model = gradflow.load(write_model(MODEL.format(expr="gelu(x, approximate='none')")))
    gradflow.analyze(model)
    from math import erf, sqrt
    expected = [v * 0.5 * (1 + erf(v / sqrt(2))) for v in (-1.5, -0.2, 0.3, 2.0)]
    np.testing.assert_allclose(model.entries["y"].value, expected, rtol=1e-12)


@pytest.mark.parametrize("expr, message", [
    ("gelu(x, approximate=1)", "argument 'approximate' of gelu() must be a string such as 'tanh', not 1"),
    ("leaky_relu(x, slope='steep')", "argument 'slope' of leaky_relu() cannot be a string"),
])
def test_attrs_string_where_none_belongs_is_a_located_error(write_model, expr, message):
    with pytest.raises(ModelError) as caught:
        gradflow.load(write_model(MODEL.format(expr=expr)))
    assert caught.value.message == message and caught.value.line == 5
