"""Modules, instances, repeat, dims, init and the structural mode of SPEC sections 2 and 4."""

from __future__ import annotations

import time

import numpy as np
import pytest

import gradflow
from tests.conftest import BLOCK, MODELS

MLP = """
gradflow: 1
dims: {n: 3, hidden: 5}
inputs:
  x: {shape: [4, n]}
modules:
  mlp:
    inputs: [x]
    dims: {out: 2}
    params:
      w1: {shape: [n, hidden]}
      w2: {shape: [hidden, out]}
    graph:
      h: tanh(x @ w1)
      y: h @ w2
    output: y
"""


def load(write_model, text, **kw):
    return gradflow.load(write_model(text), **kw)


def test_module_called_by_name_twice_shares_weights(write_model):
    model = load(write_model, MLP + """
graph:
  a: mlp(x)
  b: mlp(x * 2)
  loss: sum(a) + sum(b)
losses: [loss]
""")
    assert list(model.params) == ["mlp.w1", "mlp.w2"]
    assert model.entries["a"].shape == (4, 2)


def test_instances_are_separate_copies_with_their_own_dims(write_model):
    model = load(write_model, MLP + """
instances:
  critic: {module: mlp, dims: {out: 1}}
  target: mlp
graph:
  a: critic(x)
  b: target(x)
  loss: sum(a) + sum(b)
losses: [loss]
""")
    assert list(model.params) == ["critic.w1", "critic.w2", "target.w1", "target.w2"]
    assert model.params["critic.w2"].shape == (5, 1)
    assert model.params["target.w2"].shape == (5, 2)


def test_multi_output_module_is_unpacked(write_model):
    model = gradflow.load(MODELS / "vae.yaml")
    assert model.entries["mu"].shape == model.entries["logvar"].shape == (16, 3)
    report = gradflow.analyze(model)
    assert report.status("encoder.w_logvar", "elbo_loss") == "flows"


def test_nested_module_parameters_have_dotted_names(write_model):
    model = load(write_model, """
gradflow: 1
inputs:
  x: {shape: [2, 3]}
modules:
  inner:
    inputs: [x]
    params:
      w: {shape: [3, 3]}
    graph:
      y: x @ w
    output: y
  outer:
    inputs: [x]
    params:
      b: {shape: [3], init: zeros}
    graph:
      y: inner(x) + b
    output: y
instances:
  enc: outer
graph:
  loss: sum(enc(x))
losses: [loss]
""")
    assert list(model.params) == ["enc.b", "enc.inner.w"]
    report = gradflow.analyze(model)
    assert report.status("enc.inner.w", "loss") == "flows"
    [stop] = [n for n in model.tape.nodes if n.meta and n.meta.entry == "enc.inner.y"]
    assert stop.op.name == "matmul"


def test_repeat_unrolls_a_block_into_numbered_instances(write_model):
    model = load(write_model, BLOCK.replace("{d: 4}", "{d: 4, depth: 3}") + """graph:
  a: repeat(block, x, times=depth, name="enc")
  b: repeat(block, a, times=2)
  loss: sum(b)
losses: [loss]
""")
    assert list(model.params) == ["enc.0.w", "enc.1.w", "enc.2.w", "block.0.w", "block.1.w"]
    report = gradflow.analyze(model)
    assert all(report.status(n, "loss") == "flows" for n in model.params)


STACKS = BLOCK + """graph:
  memory: repeat(block, x, times=2)
  dec: repeat(block, memory, times=3)
  loss: sum(dec)
losses: [loss]
"""


def test_a_second_repeat_of_a_block_under_its_default_name_is_an_error_not_shared_weights(write_model):
    # An encoder and a decoder stacked from one block: silently sharing block.0 and block.1
    # would be a wiring bug of gradflow's making.
    with pytest.raises(gradflow.ModelError) as e:
        gradflow.load(write_model(STACKS))
    assert (e.value.line, e.value.col) == (15, 8)
    assert e.value.message == ('repeat(): the instances block.0, ... of the repeat on line 14 would be used again '
                               'here, sharing their weights: give this one its own name="dec", or write '
                               'name="block" in both to share them')
    shared = STACKS.replace("times=2)", 'times=2, name="block")').replace("times=3)", 'times=3, name="block")')
    assert list(gradflow.load(write_model(shared)).params) == ["block.0.w", "block.1.w", "block.2.w"]
    own = STACKS.replace("times=3)", 'times=3, name="dec")')
    assert list(gradflow.load(write_model(own)).params) == ["block.0.w", "block.1.w", "dec.0.w", "dec.1.w",
                                                            "dec.2.w"]


def test_a_module_whose_body_repeats_a_block_may_be_called_twice_sharing_it(write_model):
    # One repeat call evaluated twice (a shared instance applied to two inputs) is no second repeat.
    text = STACKS.replace("  memory: repeat(block, x, times=2)\n  dec: repeat(block, memory, times=3)\n",
                          "  a: tower(x)\n  dec: tower(a)\n").replace(
        "graph:\n  a:", "  tower:\n    inputs: [h]\n    graph:\n      y: repeat(block, h, times=2)\n"
                       "    output: y\ngraph:\n  a:")
    assert list(gradflow.load(write_model(text)).params) == ["tower.block.0.w", "tower.block.1.w"]


def test_dims_override_changes_shapes(write_model):
    model = load(write_model, MLP + "graph:\n  loss: sum(mlp(x))\nlosses: [loss]\n", dims={"n": 7})
    assert model.params["mlp.w1"].shape == (7, 5)
    assert model.inputs["x"].shape == (4, 7)


def test_initial_values_depend_only_on_seed_and_name(write_model):
    base = """
gradflow: 1
params:
  a: {shape: [3, 3]}
  {extra}
  b: {shape: [4], init: normal(0.0, 2.0)}
graph:
  loss: sum(a) + sum(b)
losses: [loss]
"""
    one = load(write_model, base.replace("{extra}", ""), seed=3)
    two = load(write_model, base.replace("{extra}", "c: {shape: [5, 5]}"), seed=3)
    for m in (one, two):
        m.materialize()
    np.testing.assert_array_equal(one.params["a"].value, two.params["a"].value)
    np.testing.assert_array_equal(one.params["b"].value, two.params["b"].value)
    other = load(write_model, base.replace("{extra}", ""), seed=4)
    other.materialize()
    assert not np.array_equal(one.params["a"].value, other.params["a"].value)


@pytest.mark.parametrize("init,check", [
    ("zeros", lambda v: np.all(v == 0)),
    ("ones", lambda v: np.all(v == 1)),
    ("constant(2.5)", lambda v: np.all(v == 2.5)),
    ("uniform(-1, n)", lambda v: v.min() >= -1 and v.max() <= 6 and v.std() > 0),
    ("normal(10, 0.001)", lambda v: abs(v.mean() - 10) < 0.01),
    ("glorot", lambda v: np.abs(v).max() <= np.sqrt(6 / (6 + 20))),
    ("he", lambda v: abs(v.std() - np.sqrt(2 / 6)) < 0.1),
])
def test_init_kinds_accept_numbers_and_dim_names(write_model, init, check):
    model = load(write_model, f"""
gradflow: 1
dims: {{n: 6}}
params:
  w: {{shape: [n, 20], init: {init}}}
graph:
  loss: sum(w)
losses: [loss]
""")
    model.materialize()
    assert check(model.params["w"].value)


def test_int_inputs_from_randint(write_model):
    model = load(write_model, """
gradflow: 1
dims: {k: 4}
inputs:
  idx: {shape: [100], dtype: int, init: randint(0, k)}
params:
  table: {shape: [k, 2]}
graph:
  loss: sum(take(table, idx, axis=0))
losses: [loss]
""")
    model.materialize()
    values = model.inputs["idx"].value
    assert values.dtype.kind == "i" and values.min() >= 0 and values.max() < 4


def test_float32_run_stays_float32(write_model):
    model = gradflow.load(MODELS / "stop_gradient_tape.yaml", dtype="float32")
    report = gradflow.analyze(model)
    assert report.grad("x", "z").dtype == np.float32
    assert report.pair("x", "z").norm == pytest.approx(7.0)


GPT3 = {"layers": 96, "d": 12288, "heads": 96, "head_dim": 128, "ff": 49152, "vocab": 50257,
        "seq": 2048, "batch": 1}


def test_structural_mode_handles_a_175b_decoder_quickly():
    started = time.perf_counter()
    model = gradflow.load(MODELS / "transformer.yaml", dims=GPT3)
    report = gradflow.analyze(model, structural=True)
    elapsed = time.perf_counter() - started
    d, ff = GPT3["d"], GPT3["ff"]
    per_block = 4 * d * d + d + 4 * d + 2 * d * ff + ff + d
    expected = GPT3["layers"] * per_block + GPT3["vocab"] * d + GPT3["seq"] * d + 2 * d
    assert report.model["param_count"] == expected > 174 * 10 ** 9
    assert report.status("block.95.attention.wq", "loss") == "flows"
    assert elapsed < 10, f"structural analysis took {elapsed:.1f}s"


def test_numeric_run_above_max_memory_stops_with_advice():
    model = gradflow.load(MODELS / "transformer.yaml", dims=GPT3)
    with pytest.raises(gradflow.ModelError) as caught:
        gradflow.analyze(model)
    message = caught.value.message
    assert "GiB" in message and "--structural" in message and "--dim" in message


def test_memory_estimate_counts_values_and_gradients(write_model):
    model = load(write_model, """
gradflow: 1
params:
  w: {shape: [1000]}
graph:
  loss: sum(w * 2)
losses: [loss]
""")
    # w, the product and the loss hold values and gradients; the constant 2 only a value.
    assert model.memory_estimate() == 3 * (8000 + 8000 + 8) + 8


def expansion_error(write_model, text) -> tuple:
    started = time.perf_counter()
    with pytest.raises(gradflow.ModelError) as caught:
        load(write_model, text)
    return caught.value, time.perf_counter() - started


def test_repeat_bomb_is_refused_before_building(write_model):
    error, elapsed = expansion_error(write_model, """
gradflow: 1
inputs:
  x: {shape: [2]}
modules:
  block: {inputs: [h], graph: {out: h + h}, output: out}
graph:
  a: repeat(block, x, times=10**9)
  loss: sum(a)
losses: [loss]
""")
    assert (error.line, error.col) == (7, 6) and "larger than 1,000,000 nodes" in error.message
    assert elapsed < 1


def test_exponential_module_nesting_is_refused_before_building(write_model):
    modules = "\n".join(f"  m{k}: {{inputs: [x], graph: {{y: m{k - 1}(x) + m{k - 1}(x)}}, output: y}}"
                        for k in range(1, 40))
    error, elapsed = expansion_error(write_model, f"""
gradflow: 1
inputs:
  x: {{shape: [2]}}
modules:
  m0: {{inputs: [x], graph: {{y: x + x}}, output: y}}
{modules}
graph:
  loss: sum(m39(x))
losses: [loss]
""")
    assert "larger than 1,000,000 nodes" in error.message and error.line < 40
    assert elapsed < 1


DROPOUT = """
gradflow: 1
inputs:
  x: {shape: [200], init: ones}
graph:
  a: dropout(x, 0.5)
  b: dropout(x, 0.5)
  loss: sum(a) + sum(b)
losses: [loss]
"""


def test_each_dropout_call_gets_its_own_mask_fixed_by_the_model_seed(write_model):
    def masks(seed):
        model = gradflow.load(write_model(DROPOUT), seed=seed)
        model.materialize()
        return model.entries["a"].value != 0, model.entries["b"].value != 0
    a, b = masks(1)
    assert 60 < a.sum() < 140 and not np.array_equal(a, b)
    again_a, again_b = masks(1)
    np.testing.assert_array_equal(a, again_a)
    np.testing.assert_array_equal(b, again_b)
    assert not np.array_equal(a, masks(2)[0])


DRAWS = """
gradflow: 1
dims: {batch: 64, obs: 4, actions: 3}
inputs:
  state: {shape: [batch, obs]}
  ret: {shape: [batch]}
  noise: {shape: [batch, actions]}
params:
  policy: {shape: [obs, actions]}
  log_std: {shape: [actions]}
graph:
  logits: state @ policy
  action: multinomial(softmax(logits), 1)                  # a sampled action per row
  again: multinomial(softmax(logits), 1)
  logp: take_along_axis(log_softmax(logits), action, axis=1)[:, 0]
  reinforce: -mean(logp * ret)
  taken: mean(bernoulli(sigmoid(logits)))                  # the reward of a draw: no gradient
  sampled: mean(square(normal(logits, exp(log_std))))
  reparameterised: mean(square(logits + exp(log_std) * noise))
losses: [reinforce, taken, sampled, reparameterised]
"""


def test_each_draw_gets_its_own_seed_and_cuts_what_it_is_drawn_from(write_model):
    path = write_model(DRAWS)

    def actions(seed):
        model = gradflow.load(path, seed=seed)
        model.materialize()
        return model.entries["action"].value, model.entries["again"].value
    first, again = actions(1)
    assert first.shape == (64, 1) and first.dtype == np.int64 and not np.array_equal(first, again)
    np.testing.assert_array_equal(first, actions(1)[0])
    assert not np.array_equal(first, actions(2)[0])
    report = gradflow.analyze(gradflow.load(path))
    assert report.status("policy", "reinforce") == "flows"
    for loss, op in (("taken", "bernoulli"), ("sampled", "normal")):
        cuts = report.pair("policy", loss).cut_by
        assert report.status("policy", loss) == "blocked" and [(c.op, c.kind) for c in cuts] == [(op, "implicit")]
    assert report.status("log_std", "sampled") == "blocked"
    assert report.status("log_std", "reparameterised") == report.status("policy", "reparameterised") == "flows"


def test_a_module_takes_its_inputs_by_name_as_well_as_by_position(write_model):
    by_position = gradflow.load(write_model(BLOCK + "graph:\n  y: block(x)\n  loss: sum(y)\nlosses: [loss]\n"))
    by_name = gradflow.load(write_model(BLOCK + "graph:\n  y: block(h=x)\n  loss: sum(y)\nlosses: [loss]\n"))
    by_position.materialize()
    by_name.materialize()
    assert list(by_name.params) == ["block.w"]
    assert by_name.losses["loss"].value == by_position.losses["loss"].value
