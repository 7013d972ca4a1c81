"""The build's short cuts give what its general paths give, on good and bad input alike:
binding a call that passes only tensors, broadcasting equal shapes, a lazy tape's output
dtypes worked out once per op and input dtypes."""

from __future__ import annotations

import ast
import itertools
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradflow
from gradflow.engine import OPS, Tape
from gradflow.engine import tape as tape_module
from gradflow.engine.shapes import broadcast_shape
from gradflow.errors import ModelError, ShapeError
from gradflow.model import calls as call_handlers
from gradflow.model import evaluate, reader
from gradflow.model.build import Builder
from tests.model.test_replay import described

MODEL = """
gradflow: 1
inputs:
  x: {{shape: [3, 4]}}
  i: {{shape: [3], dtype: int, init: randint(0, 3)}}
params:
  w: {{shape: [3, 4]}}
graph:
  y: {expr}
  loss: sum(w)
losses: [loss]
"""


def calls(op) -> list:
    """Calls of ``op`` with as many arguments as it has tensor inputs (tensors of both dtypes,
    a number), one fewer, one more, and a keyword: the short cut's case and its neighbours."""
    n = len(op.inputs)
    out = [f"{op.name}({', '.join(args)})" for args in itertools.product(("w", "i", "2"), repeat=n)]
    return out + [f"{op.name}({', '.join(['w'] * (n - 1))})", f"{op.name}({', '.join(['w'] * (n + 1))})",
                  f"{op.name}({', '.join(['w'] * n)}, axis=0)", f"{op.name}([w, x])"]


def outcome(path) -> tuple:
    try:
        return "model", described(gradflow.load(path))
    except ModelError as e:
        return "error", e.message, e.line, e.col


@pytest.mark.parametrize("name", sorted(OPS))
def test_calls_of_tensors_alone_bind_as_the_general_match_binds_them(write_model, monkeypatch, name):
    for expr in calls(OPS[name]):
        path = write_model(MODEL.format(expr=expr))
        short = outcome(path)
        with monkeypatch.context() as patch:
            patch.setattr(call_handlers, "UNBOUND", frozenset())
            assert short == outcome(path), expr


def test_the_short_cut_serves_ops_whose_attributes_all_have_defaults():
    assert {"tanh", "mul", "sum", "transpose"} <= call_handlers.UNBOUND
    assert not {"concat", "reshape", "dropout"} & call_handlers.UNBOUND   # a list of tensors, a required p


SHAPES = [(), (1,), (4,), (3, 4), (3, 1), (1, 4), (2, 3, 4), (0,), (0, 4)]


@pytest.mark.parametrize("a, b", list(itertools.product(SHAPES, SHAPES)))
def test_broadcast_shape_is_numpys_rule(a, b):
    try:
        expected = np.broadcast_shapes(a, b)
    except ValueError:
        with pytest.raises(ShapeError, match="cannot broadcast"):
            broadcast_shape(a, b)
    else:
        assert broadcast_shape(a, b) == expected and type(broadcast_shape(list(a), list(b))) is tuple


@pytest.mark.parametrize("float_dtype", [np.float64, np.float32])
def test_a_lazy_tapes_output_dtypes_are_the_ops_own_each_time(monkeypatch, float_dtype):
    monkeypatch.setattr(tape_module, "OUT_DTYPES", {})   # the first time found, the second remembered
    tape = Tape(float_dtype, eager=False)
    leaves = {"f": tape.leaf(shape=(3,)), "i": tape.leaf(shape=(3,), dtype=np.int64)}
    for op in OPS.values():
        if op.attrs:
            continue
        for kinds in itertools.product("fi", repeat=3 if op.variadic else len(op.inputs)):
            parents = [leaves[k] for k in kinds]
            for _ in range(2):
                try:
                    shape, dtype = tape.infer(op, parents, {})
                except ShapeError:
                    continue
                assert dtype == op.out_dtype([p.dtype for p in parents], tape.dtype), (op.name, kinds)
                assert shape == op.infer_shape(*[p.shape for p in parents]), (op.name, kinds)


PIECES = """
gradflow: 1
dims: {n: 4}
params:
  w: {shape: [n]}
graph:
  a, b: split(w, 2)
  loss: sum(a)
losses: [loss]
"""


@pytest.mark.parametrize("name", ["w", "a", "n", "True", "nothing", "sum"])
def test_a_name_evaluates_as_its_lookup_finds_it(write_model, name):
    model = gradflow.load(write_model(PIECES))
    builder = Builder(model.spec)
    tensors = {**model.params, **model.entries, "pair": (model.entries["a"], model.entries["b"])}
    scope = evaluate.Scope("", tensors, model.dims, {}, "the graph")
    evaluator = evaluate.Evaluator(builder, scope, "y")
    for node in (ast.Name(name, ast.Load(), lineno=2, col_offset=3), ast.Name("pair", ast.Load())):
        found = []
        for evaluate_name in (evaluator.eval, evaluator.eval_Name):   # the short cut, the general way
            try:
                found.append(evaluate_name(node))
            except ModelError as e:
                found.append((e.message, e.line, e.col))
        assert found[0] is found[1] or found[0] == found[1]


NAMED = ["if", "_", "a1", "1a", "ab", "G.0.w", "a.b", "a.", ".a", "a.1b", "a\n", "a.²", "a..b"]
NAME = r"[A-Za-z_][A-Za-z0-9_]*(\.([A-Za-z_][A-Za-z0-9_]*|[0-9]+))*\Z"   # dotted, integer segments after the first


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from("aZ_09.é- "), max_size=6) | st.sampled_from(NAMED))
def test_a_name_is_what_the_pattern_says(text):
    # The loader reads names without a pattern (reader.is_name).
    assert reader.is_name(text) == (re.match(NAME, text) is not None)
