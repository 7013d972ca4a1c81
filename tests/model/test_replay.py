"""Repeated blocks replayed from a template record exactly what building each instance would."""

from __future__ import annotations

import numpy as np
import pytest

import gradflow
from gradflow.errors import ModelError
from gradflow.model import build, modules

BLOCKS = """
gradflow: 1
dims: {d: 6}
inputs:
  x: {shape: [3, d]}
  m: {shape: [d], init: uniform(0, 1)}
params:
  v: {shape: [6]}
modules:
  block:
    inputs: [h]
    params:
      w: {shape: [d, d]}
      g: {shape: [d]}
      b: {shape: [d]}
    graph:
      half: 0.5
      z: layer_norm(h @ w, g, b) * m
      out: h + half * tanh(z) - 2
    output: out
  shrink:
    inputs: [h]
    graph:
      y: sin(h[1:]) * 3
    output: y
  noisy:
    inputs: [h]
    graph:
      y: dropout(h, 0.5) + 1
    output: y
  fixed:
    inputs: [h]
    graph:
      y: m
    output: y
  same:
    inputs: [h]
    graph:
      y: h
    output: y
graph:
  a: repeat(block, x, times=4, name="enc")
  a2: repeat(block, a, times=3, name="enc")
  s: repeat(shrink, v, times=3)
  n: repeat(noisy, a2, times=3)
  f: repeat(fixed, v, times=3)
  i: repeat(same, s, times=3)
  loss: sum(n) + sum(s) + sum(f) + sum(i)
losses: [loss]
"""


def described(model) -> list:
    """Every tape node as plain data: what it is, what feeds it, where it comes from."""
    rows = []
    for node in model.tape.nodes:
        value = None if node.op is not None or node.value is None else node.value.tobytes()
        rows.append((node.op and node.op.name, tuple(p.index for p in node.parents), dict(node.attrs or {}),
                     node.shape, str(node.dtype), node.requires_grad, node.meta, value))
    return rows


def both_ways(monkeypatch, path, **kw):
    replayed = gradflow.load(path, **kw)
    with monkeypatch.context() as patch:
        patch.setattr(modules, "replayable", lambda *args: False)
        built = gradflow.load(path, **kw)
    return replayed, built


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_replayed_instances_match_instances_built_one_by_one(write_model, monkeypatch, dtype):
    replayed, built = both_ways(monkeypatch, write_model(BLOCKS), dtype=dtype)
    assert described(replayed) == described(built)
    assert replayed.params.keys() == built.params.keys() and replayed.inits == built.inits
    assert replayed.inits["enc.2.g"] == ("ones", ())      # a gain's default, found on replayed nodes too
    first, second = (gradflow.analyze(m).to_dict() for m in (replayed, built))
    assert first == second
    for name in replayed.params:
        assert np.array_equal(replayed.params[name].value, built.params[name].value)


def test_replay_stops_at_the_node_limit_with_the_same_error(write_model, monkeypatch):
    # `h * 2` records a constant beside the product: the expansion estimate counts only the
    # product, so the limit is reached while recording, on a node the replay would copy.
    path = write_model("gradflow: 1\nparams:\n  w: {shape: [4]}\nmodules:\n  step:\n    inputs: [h]\n"
                       "    graph:\n      y: h * 2\n    output: y\n"
                       "graph:\n  h: repeat(step, w, times=30)\n  loss: sum(h)\nlosses: [loss]\n")
    monkeypatch.setattr(build, "MAX_NODES", 50)
    errors = []
    for replay in (True, False):
        with monkeypatch.context() as patch:
            if not replay:
                patch.setattr(modules, "replayable", lambda *args: False)
            with pytest.raises(ModelError) as caught:
                gradflow.load(path)
            errors.append(str(caught.value))
    assert errors[0] == errors[1] and "grows past 50 nodes" in errors[0]
    assert errors[0].endswith("while expanding modules: check repeat counts and nested module calls")
