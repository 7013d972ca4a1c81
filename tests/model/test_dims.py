"""Dims as integer expressions of other dims, in the file, modules and instances."""

from __future__ import annotations

import re

import pytest

import gradflow
from gradflow.errors import ModelError

ATTENTION = """
gradflow: 1
dims: {d_model: 8, heads: 2, d_head: d_model // heads, wide: (d_head + 1) * 2 - 2}
inputs:
  x: {shape: [3, d_model]}
params:
  w: {shape: [d_model, d_head]}
  v: {shape: [d_head, wide]}
graph:
  loss: sum(x @ w @ v)
losses: [loss]
"""

MODULES = """
gradflow: 1
dims: {obs: 4, actions: 3}
inputs:
  s: {shape: [2, obs]}
modules:
  mlp:
    inputs: [x]
    dims: {out: 1, hidden: out * 4}
    params:
      w1: {shape: [obs, hidden]}
      w2: {shape: [hidden, out]}
    graph:
      y: tanh(x @ w1) @ w2
    output: y
instances:
  critic: mlp
  actor: {module: mlp, dims: {out: actions}}
graph:
  loss: sum(critic(s)) + sum(actor(s))
losses: [loss]
"""


def shapes(model) -> dict:
    return {name: t.shape for name, t in model.params.items()}


def test_dim_expressions_are_evaluated(write_model):
    model = gradflow.load(write_model(ATTENTION))
    assert model.dims == {"d_model": 8, "heads": 2, "d_head": 4, "wide": 8}
    assert shapes(model) == {"w": (8, 4), "v": (4, 8)}


def test_overriding_a_dim_moves_the_dims_made_from_it(write_model):
    model = gradflow.load(write_model(ATTENTION), dims={"d_model": 16})
    assert model.dims["d_head"] == 8 and shapes(model)["w"] == (16, 8)


def test_module_and_instance_dims_may_be_expressions_of_the_files_dims(write_model):
    model = gradflow.load(write_model(MODULES))
    assert shapes(model) == {"critic.w1": (4, 4), "critic.w2": (4, 1), "actor.w1": (4, 12), "actor.w2": (12, 3)}
    assert gradflow.analyze(model).status("actor.w1", "loss") == "flows"


@pytest.mark.parametrize("dims, words, col", [
    ("{a: b, b: a}", "cycle", 17),
    ("{a: 4, b: c + 1}", "unknown dim 'c'", 17),
    ("{a: 4, b: a - 4}", "a dim must be a positive integer, got 0", 17),
    ("{a: 4, b: a / 2}", "use '//'", 17),
    ("{a: 4, b: a ** 2}", "only dim names", 17),
    ("{a: 4, b: a // 0}", "division by zero", 17),
    ("{a: 4, b: f(a)}", "only dim names", 17),
    ("{a: 4, b: 99999999999 * 99999999999}", "too large", 17),
    ("{a: 4, sum: 2}", "is the name of an op", 14),
])
def test_bad_dim_expression_is_a_located_error(write_model, dims, words, col):
    text = f"gradflow: 1\ndims: {dims}\nparams:\n  w: {{shape: [3]}}\ngraph:\n  loss: sum(w)\nlosses: [loss]\n"
    with pytest.raises(ModelError) as e:
        gradflow.load(write_model(text))
    assert words in e.value.message and (e.value.line, e.value.col) == (2, col)


def test_instance_dim_the_module_does_not_declare_is_an_error(write_model):
    with pytest.raises(ModelError) as e:
        gradflow.load(write_model(MODULES.replace("dims: {out: actions}", "dims: {outt: actions}")))
    assert "module 'mlp' has no dim 'outt' (did you mean 'out'?)" in e.value.message
    assert e.value.line == 17


# ---------------------------------------------------------------- sizes counted before building
def test_a_long_flat_sum_is_not_deep_nesting(write_model):
    terms = " + ".join(["w"] * 2400)
    path = write_model(f"gradflow: 1\nparams:\n  w: {{shape: [4], init: ones}}\ngraph:\n"
                       f"  loss: sum({terms})\nlosses: [loss]\n")
    report = gradflow.analyze(gradflow.load(path))
    assert report.pair("w", "loss").norm == pytest.approx(2400 * 2)


def test_the_node_limit_counts_recorded_ops_not_expression_tree_nodes(write_model):
    from gradflow.model.build import MAX_NODES
    from gradflow.model.load import load_spec
    from gradflow.model.modules import check_expansion
    text = ("gradflow: 1\nmodules:\n  step:\n    inputs: [x]\n    graph:\n      y: tanh(x)\n    output: y\n"
            "params:\n  w: {shape: [4]}\ngraph:\n  h: repeat(step, w, times=TIMES)\n  loss: sum(h)\n"
            "losses: [loss]\n")
    check_expansion(load_spec(write_model(text.replace("TIMES", "999990"))), {}, MAX_NODES)   # fits
    with pytest.raises(ModelError):
        check_expansion(load_spec(write_model(text.replace("TIMES", "2 * 600000"))), {}, MAX_NODES)


def test_window_temporaries_count_in_the_memory_estimate(write_model):
    text = ("gradflow: 1\ninputs:\n  x: {shape: [1, 1, 64, 64]}\nparams:\n  w: {shape: [1, 1, 9, 9]}\n"
            "graph:\n  loss: sum(conv2d(x, w))\nlosses: [loss]\n")
    model = gradflow.load(write_model(text))
    values_and_grads = sum(n.size * 8 * (3 if n.requires_grad else 1) for n in model.tape.nodes)
    windows = 56 * 56 * 81 * 8          # every output position reads a 9x9 window
    assert model.memory_estimate() == values_and_grads + windows


@pytest.mark.parametrize("name", ["a", "_", "d_model", "X9", "a.b", "9a", "a-b", "é", "ａ", "a b"])
def test_a_dim_name_is_ascii_letters_digits_and_underscores(write_model, name):
    path = write_model(f"gradflow: 1\ndims: {{'{name}': 2}}\nparams:\n  w: {{shape: [2]}}\n"
                       "graph:\n  loss: sum(w)\nlosses: [loss]\n")
    valid = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) is not None
    try:
        gradflow.load(path)
        assert valid
    except ModelError as e:
        assert not valid and "is not a valid dim name" in e.message
