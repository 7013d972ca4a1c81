"""Counterfactual norms (every explicit stop as the identity) and each stop's cut_norm.

The analysis gets both from sweeps that start at the stops; here they are checked
against the plain definition, a whole backward pass with the stops opened, and
against PyTorch with the detaches removed.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import gradflow
from gradflow.analysis.flow import Graph
from tests.conftest import MODELS

NESTED = """
gradflow: 1
params:
  w: {value: 3.0}
  v: {value: 5.0}
graph:
  loss: stop_gradient(2 * stop_gradient(w)) * v
losses: [loss]
"""

SHIPPED = sorted(MODELS.glob("*.yaml")) + sorted((Path(__file__).parent.parent / "models" / "bugs").glob("*.yaml"))


def opened_norms(model, loss, through) -> dict:
    """Each parameter's gradient norm from a whole backward pass with ``through`` opened."""
    grads = model.tape.backward(loss, through=through)
    return {name: 0.0 if t.index >= len(grads) or grads[t.index] is None
            else float(np.linalg.norm(grads[t.index])) for name, t in model.params.items()}


def test_counterfactual_opens_a_stop_behind_another_stop(write_model):
    report = gradflow.analyze(gradflow.load(write_model(NESTED)))
    assert report.status("w", "loss") == "blocked"
    assert report.pair("w", "loss").counterfactual_norm == pytest.approx(10.0)   # d(2 w v)/dw = 2 v


@pytest.mark.torch
def test_counterfactual_of_nested_stops_matches_torch_without_detach(write_model):
    torch = pytest.importorskip("torch")
    w, v = torch.tensor(3.0, dtype=torch.float64, requires_grad=True), torch.tensor(5.0, dtype=torch.float64)
    (grad,) = torch.autograd.grad((2 * w) * v, w)
    report = gradflow.analyze(gradflow.load(write_model(NESTED)))
    assert report.pair("w", "loss").counterfactual_norm == pytest.approx(abs(grad.item()), rel=1e-12)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_counterfactual_norms_equal_a_whole_pass_through_every_stop(path):
    model = gradflow.load(path, dims={"batch": 4} if "batch" in path.read_text() else None)
    report = gradflow.analyze(model)
    stops = {c.index for c in Graph(model.tape, model.params).all_cuts() if c.kind == "explicit"}
    for loss_name, loss in model.losses.items():
        want = opened_norms(model, loss, stops)
        for name in model.params:
            got = report.pair(name, loss_name).counterfactual_norm
            assert got == pytest.approx(want[name], rel=1e-9, abs=1e-12), (loss_name, name)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_cut_norm_equals_the_difference_of_two_whole_passes(path):
    model = gradflow.load(path, dims={"batch": 4} if "batch" in path.read_text() else None)
    report = gradflow.analyze(model)
    checked = 0
    for stop in report.stops:
        for loss_name, cut in stop.cuts.items():
            if cut["cut_norm"] is None:
                continue
            loss = model.losses[loss_name]
            plain, opened = model.tape.backward(loss), model.tape.backward(loss, through={stop.cut.index})
            total = 0.0
            for t in model.params.values():
                a = opened[t.index] if t.index < len(opened) else None
                b = plain[t.index] if t.index < len(plain) else None
                total += float(np.sum(np.square((0 if a is None else a) - (0 if b is None else b))))
            assert cut["cut_norm"] == pytest.approx(total ** 0.5, rel=1e-9, abs=1e-12)
            checked += 1
    explicit = [s for s in report.stops if s.cut.kind == "explicit" and not s.redundant]
    assert checked >= len(explicit)


def test_cut_norms_stay_within_a_budget_of_passes_over_the_tape(write_model, monkeypatch):
    from gradflow.analysis import cutnorms
    lines = ["gradflow: 1", "params:", "  w: {shape: [4], init: ones}", "graph:", "  h0: w"]
    lines += [f"  h{i + 1}: tanh(h{i}) + stop_gradient(h{i})" for i in range(40)]
    lines += ["  loss: sum(h40)", "losses: [loss]"]
    path = write_model("\n".join(lines) + "\n")
    full = [s.cuts["loss"]["cut_norm"] for s in gradflow.analyze(gradflow.load(path)).stops]
    assert all(n is not None for n in full)
    monkeypatch.setattr(cutnorms, "CUT_NORM_PASSES", 3)
    bounded = [s.cuts["loss"]["cut_norm"] for s in gradflow.analyze(gradflow.load(path)).stops]
    computed = [n for n in bounded if n is not None]
    assert 0 < len(computed) < len(bounded)          # the rest is left out, not computed slowly
    assert computed == [n for n, b in zip(full, bounded) if b is not None]


BRANCHES = """
gradflow: 1
dims: {batch: 4, width: 3}
inputs:
  x: {shape: [batch, width]}
params:
  head: {shape: [width, width]}
  w0: {shape: [width, width]}
  w1: {shape: [width, width]}
graph:
  base: tanh(x @ head)
  b0: tanh(base @ w0) + stop_gradient(tanh(base @ w0))
  b1: tanh(base @ w1) + stop_gradient(base * 2)
  loss: mean(b0 + b1)
losses: [loss]
"""


@pytest.mark.parametrize("text", [BRANCHES, NESTED])
def test_counterfactual_from_the_stops_own_sweeps_equals_the_one_sweep_through_every_stop(
        write_model, monkeypatch, text):
    from gradflow.analysis import cutnorms
    model = gradflow.load(write_model(text))
    summed = gradflow.analyze(model)
    monkeypatch.setattr(cutnorms, "CUT_NORM_PASSES", 0)   # no stop swept: one sweep through all
    opened = gradflow.analyze(model)
    for name in model.params:
        got, want = summed.pair(name, "loss").counterfactual_norm, opened.pair(name, "loss").counterfactual_norm
        assert got == pytest.approx(want, rel=1e-12, abs=1e-15), name


CHAIN = "\n".join(["gradflow: 1", "params:", "  w: {shape: [4], init: normal}", "graph:", "  h0: w"]
                  + [f"  h{i + 1}: tanh(h{i}) + stop_gradient(h{i} * h{i})" for i in range(6)]
                  + ["  loss: sum(h6)", "losses: [loss]"]) + "\n"   # each stop above the next
OVERFLOW = """
gradflow: 1
params:
  w: {value: 800.0}
  v: {value: 2.0}
graph:
  loss: exp(w) * v + stop_gradient(exp(w)) * v + stop_gradient(w * v) * v
losses: [loss]
"""
INPUT_STOP = """
gradflow: 1
inputs:
  x: {shape: [3]}
params:
  w: {shape: [3]}
graph:
  loss: sum(stop_gradient(x) * w + stop_gradient(w * w) + stop_gradient(tanh(w)))
losses: [loss]
"""


def numbers(report) -> list:
    cuts = [(s.cut.index, name, c["cut_norm"]) for s in report.stops for name, c in s.cuts.items()]
    pairs = [(p.name, loss, pair.counterfactual_norm) for p in report.params for loss, pair in p.grads.items()]
    return cuts + pairs


@pytest.mark.parametrize("text", [BRANCHES, NESTED, CHAIN, OVERFLOW, INPUT_STOP],
                         ids=["branches", "nested", "chain", "overflow", "input-stop"])
def test_cut_norms_from_one_walk_equal_one_sweep_per_stop(write_model, monkeypatch, text):
    from gradflow.analysis import cutnorms
    model = gradflow.load(write_model(text))
    monkeypatch.setattr(cutnorms, "together_pays", lambda *args: True)
    together = numbers(gradflow.analyze(model))
    monkeypatch.setattr(cutnorms, "together_pays", lambda *args: False)   # as when over the budget
    apart = numbers(gradflow.analyze(model))
    assert [x[:2] for x in together] == [x[:2] for x in apart]
    for (*where, got), (_, _, want) in zip(together, apart):
        if got is None or want is None or not np.isfinite(want):
            assert got == want or (got != got and want != want), where
        else:
            assert got == pytest.approx(want, rel=1e-12, abs=1e-300), where


@pytest.mark.parametrize("text", [BRANCHES, CHAIN, INPUT_STOP], ids=["branches", "chain", "input-stop"])
def test_cut_norms_count_a_tensor_under_two_names_twice_and_sum_it_once(write_model, monkeypatch, text):
    from types import SimpleNamespace
    from gradflow.analysis import cutnorms
    model = gradflow.load(write_model(text))
    gradflow.analyze(model)                              # values in place
    first = next(iter(model.params))
    aliased = SimpleNamespace(tape=model.tape, params={**model.params, "alias": model.params[first]})
    graph = Graph(model.tape, model.params)
    cuts = [c for c in graph.all_cuts() if c.kind == "explicit"]
    stops = {c.index for c in cuts}
    grads = model.tape.backward(model.losses["loss"], keep=stops)
    monkeypatch.setattr(cutnorms, "together_pays", lambda *args: True)
    plain, twice = (cutnorms.cut_norms(m, grads, cuts, stops) for m in (model, aliased))
    monkeypatch.setattr(cutnorms, "together_pays", lambda *args: False)
    twice_apart = cutnorms.cut_norms(aliased, grads, cuts, stops)
    for cut, norm in plain[0].items():
        assert twice[0][cut] >= norm
        assert twice[0][cut] == pytest.approx(twice_apart[0][cut], rel=1e-12)
    assert twice[0] != plain[0]                          # the alias counts in the norms...
    assert (twice[1] is None) == (twice_apart[1] is None) == (plain[1] is None)
    if twice[1] is not None:                             # ...but its tensor is summed once
        for got, want, once in zip(twice[1][1], twice_apart[1][1], plain[1][1]):
            assert (got is None) == (want is None) == (once is None)
            if got is not None:
                np.testing.assert_allclose(got, want, rtol=1e-12)
                np.testing.assert_array_equal(got, once)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_cut_norms_of_shipped_models_from_one_walk_equal_one_sweep_per_stop(path, monkeypatch):
    from gradflow.analysis import cutnorms
    model = gradflow.load(path, dims={"batch": 4} if "batch" in path.read_text() else None)
    monkeypatch.setattr(cutnorms, "together_pays", lambda *args: True)
    together = numbers(gradflow.analyze(model))
    monkeypatch.setattr(cutnorms, "together_pays", lambda *args: False)
    apart = numbers(gradflow.analyze(model))
    for (*where, got), (_, _, want) in zip(together, apart, strict=True):
        assert got == want or got == pytest.approx(want, rel=1e-12, abs=1e-300), where


def test_a_lone_tower_is_swept_per_stop_and_a_shared_trunk_walked_together(write_model, monkeypatch):
    from gradflow.analysis import cutnorms
    chosen = []
    real = cutnorms.together_pays
    monkeypatch.setattr(cutnorms, "together_pays", lambda *args: chosen.append(real(*args)) or chosen[-1])
    deep = ["gradflow: 1", "params:", "  w: {shape: [4]}", "  v: {shape: [4]}", "graph:", "  h0: w", "  k0: v"]
    deep += [f"  h{i + 1}: tanh(h{i})\n  k{i + 1}: sin(k{i})" for i in range(300)]
    deep += ["  loss: sum(stop_gradient(h300) * h300 + stop_gradient(k300) * k300)", "losses: [loss]"]
    gradflow.analyze(gradflow.load(write_model("\n".join(deep) + "\n")))   # two towers, nothing shared
    gradflow.analyze(gradflow.load(write_model(BRANCHES)))
    assert chosen == [False, True]


def towers(count: int, depth: int, shared: bool) -> str:
    """``count`` chains of ``depth`` tanh, from one parameter or one each, each stopped at its top."""
    lines = ["gradflow: 1", "params:"] + [f"  w{k}: {{shape: [4]}}" for k in range(1 if shared else count)]
    lines += ["graph:"] + [f"  h{k}_0: tanh(w{0 if shared else k})" for k in range(count)]
    lines += [f"  h{k}_{i + 1}: tanh(h{k}_{i})" for k in range(count) for i in range(depth)]
    tops = " + ".join(f"stop_gradient(h{k}_{depth}) * h{k}_{depth}" for k in range(count))
    return "\n".join(lines + [f"  loss: sum({tops})", "losses: [loss]"]) + "\n"


@pytest.mark.parametrize("path", SHIPPED + ["branches", "chain", "nested", "towers", "long-branches"], ids=str)
def test_the_walk_pays_exactly_where_its_count_of_calls_says_so(path, write_model, monkeypatch):
    """together_pays counts the walk's calls only when a bound does not decide: the same answer."""
    from gradflow.analysis import cutnorms
    from gradflow.engine.waves import calls
    asked = []
    real = cutnorms.together_pays
    monkeypatch.setattr(cutnorms, "together_pays", lambda *args: asked.append(args) or real(*args))
    texts = {"branches": BRANCHES, "chain": CHAIN, "nested": NESTED, "towers": towers(2, 300, False),
             "long-branches": towers(20, 30, True)}
    source = write_model(texts[path]) if path in texts else path
    gradflow.analyze(gradflow.load(source, dims={"batch": 4} if "batch" in Path(source).read_text() else None))
    for walk, nodes, stops, tape_nodes in asked:
        counted = 8 * calls(tape_nodes, walk.waves) + 2 * nodes < 5 * walk.visits + 40 * stops
        assert real(walk, nodes, stops, tape_nodes) == (counted and walk.held <= cutnorms.ROWS_HELD)


def test_stops_above_stops_over_large_tensors_are_swept_one_at_a_time(write_model, monkeypatch):
    from gradflow.analysis import cutnorms
    chosen = []
    real = cutnorms.together_pays
    monkeypatch.setattr(cutnorms, "together_pays", lambda *args: chosen.append(real(*args)) or chosen[-1])
    gradflow.analyze(gradflow.load(write_model(CHAIN)))
    monkeypatch.setattr(cutnorms, "ROWS_HELD", 6 * 4 * 8)    # six stops' rows of w, no room for more
    gradflow.analyze(gradflow.load(write_model(CHAIN)))
    assert chosen == [True, False]


@pytest.mark.parametrize("shape", [(), (1,), (2,), (7,), (16, 16), (3, 1, 5), (5, 1)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_sum_of_the_stops_sweeps_adds_them_one_after_another(shape, dtype):
    from gradflow.analysis.cutnorms import rows_in_turn, sum_in_order
    rng = np.random.default_rng(0)
    for count in (2, 3, 200, 5000):   # magnitudes far apart: any other grouping rounds otherwise
        rows = [(rng.standard_normal(shape) * 10.0 ** rng.integers(-8, 9, size=shape)).astype(dtype)
                for _ in range(count)]
        if count == 200:              # signed zeros, and infinities and NaN that reach some entries
            negative, either = rng.random(shape) < 0.3, rng.random(shape) < 0.3
            for k in range(count):
                rows[k] = np.where(negative, -0.0, np.where(either, (-0.0, 0.0)[k % 2], rows[k])).astype(dtype)
            rows[7] = np.where(rng.random(shape) < 0.2, np.inf, rows[7]).astype(dtype)
            rows[9] = np.where(rng.random(shape) < 0.2, -np.inf, rows[9]).astype(dtype)
            rows[11] = np.where(rng.random(shape) < 0.1, np.nan, rows[11]).astype(dtype)
        want = rows[0]
        with np.errstate(invalid="ignore"):
            for row in rows[1:]:
                want = want + row
        block = np.array(rows)
        assert rows_in_turn(block) == (block[0].size > 1)   # the block's own path where it may
        wide = np.zeros((count, 2) + shape, dtype)
        wide[:, 1] = block
        with np.errstate(invalid="ignore"):   # inf - inf: NaN, as the sweeps' sum gives it
            got_all = [sum_in_order(rows), sum_in_order(block), sum_in_order(wide[:, 1])]   # a list, rows of a block
        for got in got_all:
            assert got.dtype == want.dtype and np.shape(got) == np.shape(want)
            assert np.asarray(got).tobytes() == np.asarray(want).tobytes()   # -0.0 too, NaN where NaN


@pytest.mark.parametrize("path", SHIPPED + ["branches", "overflow", "input-stop"], ids=str)
def test_counterfactual_norms_of_small_gradients_taken_together_equal_those_one_by_one(
        path, write_model, monkeypatch):
    from gradflow.analysis import counterfactual
    texts = {"branches": BRANCHES, "overflow": OVERFLOW, "input-stop": INPUT_STOP}
    source = write_model(texts[path]) if path in texts else path
    model = gradflow.load(source, dims={"batch": 4} if "batch" in Path(source).read_text() else None)
    together = numbers(gradflow.analyze(model))
    monkeypatch.setattr(counterfactual, "STACKED_UP_TO", 0)          # every pair on its own
    apart = numbers(gradflow.analyze(model))
    for (*where, got), (_, _, want) in zip(together, apart, strict=True):
        assert got == want or got == pytest.approx(want, rel=1e-12, abs=1e-300), where


@pytest.mark.parametrize("text", [BRANCHES, NESTED, CHAIN, INPUT_STOP], ids=["branches", "nested", "chain", "input-stop"])
def test_cut_norms_from_one_walk_do_not_depend_on_how_many_rows_one_call_takes(write_model, monkeypatch, text):
    from gradflow.analysis import cutnorms
    from gradflow.engine import rows
    model = gradflow.load(write_model(text))
    monkeypatch.setattr(cutnorms, "together_pays", lambda *args: True)
    many = numbers(gradflow.analyze(model))
    monkeypatch.setattr(rows, "BATCH_BYTES", 1)          # a row per call
    one = numbers(gradflow.analyze(model))
    for (*where, got), (_, _, want) in zip(many, one, strict=True):
        assert got == want or got == pytest.approx(want, rel=1e-12, abs=1e-300), where


def shared_branches(count: int, scale: float) -> str:
    """``count`` branches over one trunk, each stopped; ``scale`` large enough overflows one of them."""
    lines = ["gradflow: 1", "dims: {batch: 4, width: 3}", "inputs:", "  x: {shape: [batch, width]}", "params:"]
    lines += [f"  w{k}: {{shape: [width, width], init: normal}}" for k in range(count)]
    lines += ["  head: {shape: [width, width], init: normal}", "graph:", "  base: tanh(x @ head)"]
    # what each stop removes far apart in magnitude: sums in any other order round otherwise
    lines += [f"  b{k}: tanh(base @ w{k}) + stop_gradient(tanh(base @ w{k})) * {10.0 ** (k % 5 - 2)}"
              for k in range(count - 1)]
    lines += [f"  b{count - 1}: exp(base @ w{count - 1} * {scale}) + stop_gradient(exp(base @ w{count - 1} * {scale}))"]
    lines += ["  loss: mean(" + " + ".join(f"b{k}" for k in range(count)) + ")", "losses: [loss]"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("held", [1, 600], ids=["a-stop-each", "a-few-each"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("scale", [1.0, 1e6], ids=["finite", "overflow"])
def test_cut_norms_from_the_walk_do_not_depend_on_how_many_stops_one_walk_takes(
        write_model, monkeypatch, dtype, scale, held):
    """Stops walked in groups give what one walk for all gives: the trunk's sums in the same order."""
    from gradflow.analysis import cutnorms
    model = gradflow.load(write_model(shared_branches(12, scale)), dtype=dtype)
    walks = []
    real = cutnorms.sweep_rows
    monkeypatch.setattr(cutnorms, "sweep_rows", lambda *args: walks.append(args) or real(*args))
    monkeypatch.setattr(cutnorms, "together_pays", lambda *args: True)
    whole = numbers(gradflow.analyze(model))
    monkeypatch.setattr(cutnorms, "GROUP_HELD", held)       # a few stops per walk, or one
    grouped = numbers(gradflow.analyze(model))
    assert len(walks) >= 3 and (len(walks) == 13) == (held == 1)
    for (*where, got), (_, _, want) in zip(grouped, whole, strict=True):
        assert got == want or got != got and want != want, where   # bit for bit, NaN where NaN
    assert any(n != n or n == math.inf for *_, n in whole if n is not None) == (scale > 1)


def test_counterfactual_when_the_budget_runs_out_midway_equals_the_one_sweep_through_every_stop(
        write_model, monkeypatch):
    from gradflow.analysis import cutnorms
    lines = ["gradflow: 1", "params:", "  w: {shape: [4], init: normal}"]
    lines += [f"  v{k}: {{shape: [4], init: normal}}" for k in range(6)]
    lines += ["graph:", "  h0: w"] + [f"  h{i + 1}: tanh(h{i})" for i in range(20)]
    lines += [f"  b{k}: tanh(h20 * v{k}) + stop_gradient(h20 * v{k})" for k in range(6)]   # stops side by side
    lines += ["  loss: sum(" + " + ".join(f"b{k}" for k in range(6)) + ")", "losses: [loss]"]
    model = gradflow.load(write_model("\n".join(lines) + "\n"))
    monkeypatch.setattr(cutnorms, "CUT_NORM_PASSES", 0)   # no stop swept: one sweep through all
    opened = gradflow.analyze(model)
    monkeypatch.setattr(cutnorms, "CUT_NORM_PASSES", 1)   # some stops swept, then the budget is spent
    midway = gradflow.analyze(model)
    norms = [s.cuts["loss"]["cut_norm"] for s in midway.stops if s.cut.kind == "explicit"]
    assert any(n is None for n in norms) and any(n is not None for n in norms)
    for name in model.params:
        got, want = midway.pair(name, "loss").counterfactual_norm, opened.pair(name, "loss").counterfactual_norm
        assert got == pytest.approx(want, rel=1e-12, abs=1e-15), name
