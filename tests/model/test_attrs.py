"""Static arguments given as strings: only an op's mode argument (gelu's approximate, max and min's
ties, binary_cross_entropy's reduction) takes one."""

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


def test_attrs_a_mode_with_no_default_takes_a_string(write_model):
    model = gradflow.load(write_model(MODEL.format(expr="scatter_reduce(x, to_int(x * 0.0), x, axis=0, "
                                                        "reduce='amax')")))
    gradflow.analyze(model)
    assert model.entries["y"].value.tolist() == [2.0, -0.2, 0.3, 2.0]   # every x into entry 0: their maximum


def test_attrs_gelu_approximate_none_is_the_exact_form(write_model):
    model = gradflow.load(write_model(MODEL.format(expr="gelu(x, approximate='none')")))
    gradflow.analyze(model)
    from math import erf, sqrt
    expected = [v * 0.5 * (1 + erf(v / sqrt(2))) for v in (-1.5, -0.2, 0.3, 2.0)]
    np.testing.assert_allclose(model.entries["y"].value, expected, rtol=1e-12)


@pytest.mark.parametrize("op, value", [("max", [1.0, 3.0, 3.0, 0.0]), ("min", [1.0, -3.0, 2.0, -3.0])])
@pytest.mark.parametrize("ties, grad", [("", [0.0, 1.0, 0.0, 0.0]), (", ties='first'", [0.0, 1.0, 0.0, 0.0]),
                                        (", ties='split'", [0.0, 0.5, 0.5, 0.0])])
def test_attrs_ties_say_which_tied_entries_get_the_gradient(write_model, op, value, ties, grad):
    path = write_model(f"""
        gradflow: 1
        params:
          w: {{shape: [4], value: {value}}}
        graph:
          loss: {op}(w{ties})
        losses: [loss]
    """)
    grad = grad if op == "max" else [0.0, grad[1], grad[3], grad[2]]
    np.testing.assert_array_equal(gradflow.analyze(gradflow.load(path)).grad("w", "loss"), grad)


@pytest.mark.parametrize("expr, message", [
    ("gelu(x, approximate=1)", "argument 'approximate' of gelu() must be a string such as 'tanh', not 1"),
    ("max(x, ties=2)", "argument 'ties' of max() must be a string such as 'first', not 2"),
    ("gelu(x, approximate='exact')", "gelu: approximate must be \"tanh\" or \"none\", not 'exact'"),
    ("max(x, ties='spilt')", "max: ties must be \"first\" or \"split\", not 'spilt'"),
    ("binary_cross_entropy(sigmoid(x), x * 0.0, reduction='avg')",
     "binary_cross_entropy: reduction must be \"mean\", \"sum\" or \"none\", not 'avg'"),
    ("leaky_relu(x, slope='steep')", "argument 'slope' of leaky_relu() cannot be a string"),
    # a mode with no default, as torch's scatter_reduce has none
    ("scatter_reduce(x, to_int(x * 0.0), x, axis=0)",
     "scatter_reduce() takes (x, idx, src, axis, reduce, include_self=True): missing reduce"),
    ("scatter_reduce(x, to_int(x * 0.0), x, axis=0, reduce=2)",
     "argument 'reduce' of scatter_reduce() must be a string such as 'amax', not 2"),
    ("scatter_reduce(x, to_int(x * 0.0), x, axis=0, reduce='max')",
     "scatter_reduce: reduce must be \"amax\", \"amin\" or \"prod\", not 'max'"),
])
def test_attrs_string_where_none_belongs_is_a_located_error(write_model, expr, message):
    with pytest.raises(ModelError) as caught:
        gradflow.load(write_model(MODEL.format(expr=expr)))
    assert caught.value.message.endswith(message) and caught.value.line == 5
