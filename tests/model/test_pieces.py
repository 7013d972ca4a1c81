"""split and chunk: several outputs from one call, as torch cuts them; indices out of range."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import gradflow
import gradflow.engine.tape as tape_module
from gradflow.cli.main import cli
from gradflow.errors import ModelError

PIECES = """
gradflow: 1
inputs:
  x: {shape: [2, 7]}
params:
  w: {shape: [7]}
graph:
  h: x * w
  a, b, c: chunk(h, 3, axis=-1)
  p, q: split(h, 4, axis=1)
  loss: sum(a) + sum(c * 2) + sum(q * q)
losses: [loss]
"""


def test_chunk_and_split_cut_as_torch_does(write_model):
    model = gradflow.load(write_model(PIECES))
    report = gradflow.analyze(model)
    shapes = {name: model.entries[name].shape for name in ("a", "b", "c", "p", "q")}
    assert shapes == {"a": (2, 3), "b": (2, 3), "c": (2, 1), "p": (2, 4), "q": (2, 3)}
    x, w = model.inputs["x"].value, model.params["w"].value
    h = x * w
    expected = np.zeros(7)
    expected[:3] += x[:, :3].sum(0)
    expected[6] += 2 * x[:, 6].sum()
    expected[4:] += (2 * h[:, 4:] * x[:, 4:]).sum(0)
    np.testing.assert_allclose(report.grad("w", "loss"), expected, rtol=1e-12)


@pytest.mark.torch
def test_chunk_and_split_match_torch(write_model):
    torch = pytest.importorskip("torch")
    model = gradflow.load(write_model(PIECES))
    report = gradflow.analyze(model)
    x = torch.tensor(model.inputs["x"].value)
    w = torch.tensor(model.params["w"].value, requires_grad=True)
    h = x * w
    a, b, c = torch.chunk(h, 3, dim=-1)
    p, q = torch.split(h, 4, dim=1)
    (a.sum() + (c * 2).sum() + (q * q).sum()).backward()
    np.testing.assert_allclose(report.grad("w", "loss"), w.grad.numpy(), rtol=1e-12)


def test_one_output_taken_by_its_number(write_model):
    text = PIECES.replace("loss: sum(a) + sum(c * 2) + sum(q * q)",
                          "loss: sum(chunk(h, 3, axis=-1)[0]) + sum(chunk(h, 3, axis=-1)[-1] * 2) "
                          "+ sum(square(split(h, 4, axis=1)[1]))")
    report = gradflow.analyze(gradflow.load(write_model(text)))
    np.testing.assert_allclose(report.grad("w", "loss"), gradflow.analyze(gradflow.load(write_model(PIECES))).grad("w", "loss"),
                               rtol=1e-12)


@pytest.mark.parametrize("use, words", [
    ("sum(chunk(h, 3, axis=-1))", "expected a tensor, got 3: split and chunk give several"),
    ("sum([a, b])", "expected a tensor or a number, got a list"),   # a list is no split: not told so
    ("sum(chunk(h, 3, axis=-1)[3])", "numbered 0 to 2: take one by its number, not 3"),
    ("sum(chunk(h, 3, axis=-1)[0:2])", "numbered 0 to 2: take one by its number, not a slice"),
])
def test_several_outputs_used_as_one_is_a_located_error(write_model, use, words):
    with pytest.raises(ModelError) as e:
        gradflow.load(write_model(PIECES.replace("loss: sum(a) + sum(c * 2) + sum(q * q)", f"loss: {use}")))
    assert words in e.value.message and e.value.line == 10


@pytest.mark.parametrize("expression, col", [
    ("mean(w[7:])", 14), ("sum(mean(h[:, 3:3], axis=1))", 18), ("sum(chunk(h, 3, axis=-1)[0][:, :0])", 13),
])
def test_an_empty_slice_is_a_located_error(write_model, expression, col):
    result = CliRunner().invoke(cli, ["check", write_model(PIECES.replace("sum(a) + sum(c * 2) + sum(q * q)", expression))])
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert f":10:{col}: error: graph.loss: the subscript gives shape " in line
    assert line.endswith("an empty tensor: every tensor needs at least one element")


@pytest.mark.parametrize("call, words", [
    ("chunk(h, 0)", "at least 1"), ("split(h, 2, axis=5)", "axis 5 does not fit"),
    ("chunk(h)", "takes a tensor"), ("split(h, 2.5)", "whole number"),
])
def test_bad_split_or_chunk_is_a_located_error(write_model, call, words):
    text = PIECES.replace("a, b, c: chunk(h, 3, axis=-1)", f"a, b, c: {call}")
    with pytest.raises(ModelError) as e:
        gradflow.load(write_model(text))
    assert words in e.value.message and e.value.line == 8


@pytest.mark.parametrize("expression", [
    "sum(one_hot(i, 3))", "cross_entropy(reshape(w, [1, 5]), i)", "sum(take_along_axis(w, i, axis=0))",
    "sum(embedding(i, reshape(w, [5, 1])))", "sum(take(w, j, axis=0))",
])
def test_an_index_out_of_range_is_a_located_error(write_model, expression):
    path = write_model(f"gradflow: 1\ninputs:\n  i: {{value: [-1], dtype: int}}\n  j: {{value: [9], dtype: int}}\n"
                       f"params:\n  w: {{shape: [5]}}\ngraph:\n  loss: {expression}\nlosses: [loss]\n")
    result = CliRunner().invoke(cli, ["analyze", path])
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert ":8:" in line and "is out of range for size" in line


def test_a_failed_forward_names_its_op_where_earlier_buffers_were_reused(write_model, monkeypatch):
    monkeypatch.setattr(tape_module, "REUSE_BYTES", 0)     # x @ w and the add give their buffers on
    path = write_model("gradflow: 1\ninputs:\n  x: {shape: [4, 3]}\n  i: {value: [9], dtype: int}\n"
                       "params:\n  w: {shape: [3, 3]}\ngraph:\n  h: take(tanh(x @ w + 1), i, axis=0)\n"
                       "  loss: sum(h)\nlosses: [loss]\n")
    model = gradflow.load(path)
    with pytest.raises(ModelError) as e:
        gradflow.analyze(model)
    assert "take failed" in e.value.message and (e.value.line, e.value.col) == (8, 6)
    assert any(n.op is not None and n.value is None for n in model.tape.nodes[:model.tape.failed.index])
