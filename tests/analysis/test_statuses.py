"""The four statuses and their reasons, on small models written for each."""

from __future__ import annotations

import numpy as np
import pytest

import gradflow
from tests.conftest import BLOCK


def analyze(write_model, text, **kw):
    return gradflow.analyze(gradflow.load(write_model(text)), **kw)


def test_status_unreachable_when_no_path(write_model):
    report = analyze(write_model, """
        gradflow: 1
        params:
          a: {shape: [3], init: ones}
          b: {shape: [3], init: ones}
        graph:
          la: sum(a * a)
          lb: sum(b)
        losses: [la, lb]
    """)
    assert report.status("b", "la") == "unreachable"
    assert report.status("a", "lb") == "unreachable"
    pair = report.pair("b", "la")
    assert pair.cut_by == [] and pair.norm == 0.0


def test_status_zero_names_the_dead_relu(write_model):
    report = analyze(write_model, """
        gradflow: 1
        params:
          w: {shape: [3], init: ones}
        graph:
          h: relu(-w)
          loss: sum(h) + 1
        losses: [loss]
    """)
    pair = report.pair("w", "loss")
    assert pair.status == "zero"
    assert [(c.node, c.op, c.line) for c in pair.dies_at] == [("h", "relu", 5)]
    assert pair.zero_fraction == 1.0


def test_status_zero_when_multiplied_by_zero(write_model):
    report = analyze(write_model, """
        gradflow: 1
        params:
          w: {shape: [2, 2]}
        inputs:
          x: {shape: [4, 2], init: zeros}
        graph:
          loss: sum(x @ w)
        losses: [loss]
    """)
    pair = report.pair("w", "loss")
    assert pair.status == "zero"
    assert [c.op for c in pair.dies_at] == ["matmul"]


def test_a_zero_gradient_from_shares_that_cancel_blames_where_they_meet_not_the_ops_that_pass_them(write_model):
    # b*x - b*x: each mul passes +-x back to b; the zero is their sum. No mul is to blame.
    report = analyze(write_model, """
        gradflow: 1
        params:
          b: {shape: [3], init: ones}
          c: {shape: [3], init: ones}
        inputs:
          x: {shape: [3], init: ones}
        graph:
          lb: sum(b * x - b * x)
          h: c * x
          lc: sum(h * x) - sum(h * x)
          ld: sum(h - h)
        losses: [lb, lc, ld]
    """)
    assert report.pair("b", "lb").status == "zero" and report.pair("b", "lb").dies_at == []
    # at a node, the shares meet there: h's gradient is the zero
    assert [(c.node, c.op) for c in report.pair("c", "lc").dies_at] == [("h", "mul")]
    # one op whose own shares cancel (h - h passes +g and -g to h) is where it dies
    assert [(c.node, c.op) for c in report.pair("c", "ld").dies_at] == [("ld", "sub")]


def test_shares_that_cancel_in_a_parameter_renamed_by_a_cut_write_cancel_in_the_parameter(write_model):
    # b_new is b written under no_grad, as the importer spells a weight clip: b by another name
    report = analyze(write_model, """
        gradflow: 1
        params:
          b: {shape: [3], init: ones}
        inputs:
          x: {shape: [3], init: ones}
        graph:
          b_new: b + stop_gradient(clip(b, 0, 0.5) - b)
          twice: b_new + stop_gradient(b_new * 0)
          lb: sum(twice * x) - sum(twice * x)
          lc: sum(b_new * b_new * x) - sum(b_new * x) * 0
          scaled: b * x + stop_gradient(b)
          ld: sum(scaled) - sum(scaled)
        losses: [lb, lc, ld]
    """)
    assert report.pair("b", "lb").status == "zero" and report.pair("b", "lb").dies_at == []
    assert report.pair("b", "lc").status == "flows"
    # b * x plus a cut term is no renaming of b: the shares meet in scaled
    assert [(c.node, c.op) for c in report.pair("b", "ld").dies_at] == [("scaled", "add")]


def test_a_zero_gradient_dies_at_its_own_block_not_at_every_dead_block_after_it(write_model):
    # Each block's ReLU is dead, and the residual carries the gradient past it: block.0.w's
    # gradient dies in block 0 alone. (Naming every later block made the report quadratic.)
    report = gradflow.analyze(gradflow.load(write_model(
        BLOCK.replace("h + tanh(h @ w)", "relu(-abs(h @ w)) + h")
        + "graph:\n  h: repeat(block, x, times=4)\n  loss: sum(h)\nlosses: [loss]\n")))
    for i in range(4):
        pair = report.pair(f"block.{i}.w", "loss")
        assert pair.status == "zero" and [(c.node, c.op) for c in pair.dies_at] == [(f"block.{i}.out", "relu")]


def test_status_zero_with_a_partial_implicit_cut(write_model):
    report = analyze(write_model, """
        gradflow: 1
        params:
          w: {shape: [3], init: normal}
        graph:
          loss: sum(w * 0 + 1) * max(w > 0)
        losses: [loss]
    """)
    # w has a path through (w * 0 + 1): zero there; the comparison path is cut.
    pair = report.pair("w", "loss")
    assert pair.status == "zero"
    assert [(c.op, c.kind) for c in pair.partially_cut_by] == [("greater", "implicit")]


def test_status_blocked_by_argmax_blames_it_not_the_take(write_model):
    report = analyze(write_model, """
        gradflow: 1
        params:
          scores: {shape: [4], init: normal}
          table: {shape: [4, 2], init: normal}
        graph:
          pick: argmax(scores)
          row: take(table, pick, axis=0)
          loss: sum(row)
        losses: [loss]
    """)
    pair = report.pair("scores", "loss")
    assert pair.status == "blocked"
    assert [(c.node, c.op, c.kind, c.line) for c in pair.cut_by] == [("pick", "argmax", "implicit", 6)]
    assert report.status("table", "loss") == "flows"
    [stop] = [s for s in report.stops if s.cut.op == "argmax"]
    assert stop.cuts["loss"]["blocks"] == ["scores"] and stop.redundant is False


def test_an_index_sliced_or_a_condition_scaled_after_its_cut_still_blames_the_cut(write_model):
    report = analyze(write_model, """
        gradflow: 1
        inputs: {x: {shape: [4, 3]}}
        params: {w: {shape: [4, 3]}}
        graph:
          i: argmax(w, axis=1)
          viaslice: sum(take(x, i[1:], axis=0))
          viamul: sum(where((w[0] > 0) * 1.0, x[0], x[1]))
        losses: [viaslice, viamul]
    """)
    assert [(c.node, c.op) for c in report.pair("w", "viaslice").cut_by] == [("i", "argmax")]
    assert [(c.node, c.op, c.col) for c in report.pair("w", "viamul").cut_by] == [("viamul", "greater", 22)]
    assert sorted(s.cut.op for s in report.stops) == ["argmax", "greater"]   # no take, no where


def test_a_stop_in_front_of_an_implicit_cut_is_redundant(write_model):
    report = analyze(write_model, """
        gradflow: 1
        params:
          w: {shape: [3], init: normal}
        graph:
          loss: sum(stop_gradient(round(w))) + sum(w)
        losses: [loss]
    """)
    by_op = {s.cut.op: s for s in report.stops}
    assert by_op["round"].cuts["loss"]["partial"] == ["w"]
    assert by_op["stop_gradient"].redundant is True
    assert [c.op for c in report.pair("w", "loss").partially_cut_by] == ["round"]
    assert [f.rule for f in report.findings] == ["GF106"]


def test_a_vq_vae_encoder_is_not_cut_by_the_stop_it_reaches_only_through_the_argmin(write_model):
    report = analyze(write_model, """
        gradflow: 1
        inputs: {x: {shape: [5, 3]}}
        params:
          enc: {shape: [3, 2]}
          codebook: {shape: [4, 2]}
        graph:
          z_e: x @ enc
          code: argmin(sum(square(expand_dims(z_e, 1) - codebook), axis=-1), axis=1)
          z_q: take(codebook, code, axis=0)
          commit: mse(z_e, stop_gradient(z_q))
        losses: [commit]
    """)
    enc, codebook = report.pair("enc", "commit"), report.pair("codebook", "commit")
    assert enc.status == "flows"
    assert [(c.node, c.op) for c in enc.partially_cut_by] == [("code", "argmin")]
    assert codebook.status == "blocked"
    assert [(c.node, c.op) for c in codebook.cut_by] == [("code", "argmin"), ("commit", "stop_gradient")]
    [commit_stop] = [s for s in report.stops if s.cut.op == "stop_gradient"]
    assert (commit_stop.cuts["commit"]["blocks"], commit_stop.cuts["commit"]["partial"]) == (["codebook"], [])


def test_status_blocked_lists_the_cut_on_each_path(write_model):
    report = analyze(write_model, """
        gradflow: 1
        params:
          w: {shape: [3], init: normal}
        graph:
          a: stop_gradient(w) * 2
          b: detach(w * 3)
          loss: sum(a + b)
        losses: [loss]
    """)
    pair = report.pair("w", "loss")
    assert pair.status == "blocked"
    assert [(c.node, c.op, c.kind, c.line, c.col) for c in pair.cut_by] == [
        ("a", "stop_gradient", "explicit", 5, 6), ("b", "stop_gradient", "explicit", 6, 6)]
    # With both stops as the identity, d/dw sum(2w + 3w) = 5 for each of the 3 entries.
    assert pair.counterfactual_norm == pytest.approx(5 * np.sqrt(3.0))


def test_nested_stop_is_redundant(write_model):
    report = analyze(write_model, """
        gradflow: 1
        params:
          w: {shape: [3], init: normal}
        graph:
          inner: stop_gradient(w)
          loss: sum(stop_gradient(inner * 2) + w)
        losses: [loss]
    """)
    # The inner stop is what cuts w; the outer one, in front of it, cuts nothing.
    by_node = {(s.cut.node, s.cut.col): s for s in report.stops}
    assert by_node[("inner", 10)].redundant is False
    assert by_node[("inner", 10)].cuts["loss"]["partial"] == ["w"]
    assert by_node[("loss", 13)].redundant is True
    assert [(f.rule, f.col) for f in report.findings] == [("GF106", 13)]


def test_a_stop_that_cuts_only_from_a_loss_left_out_is_not_redundant(write_model):
    path = write_model("""
        gradflow: 1
        params:
          w: {shape: [3], init: normal}
          v: {shape: [3], init: normal}
        graph:
          inner: stop_gradient(w)
          cut: sum(stop_gradient(inner * 2) + w)
          other: sum(stop_gradient(v) + v)
        losses: [cut, other]
    """)
    model = gradflow.load(path)
    model.keep_losses(["cut"])             # what `analyze --loss cut` shows
    report = gradflow.analyze(model)
    by_node = {s.cut.node: s for s in report.stops}
    assert by_node["other"].redundant is False         # it cuts v from the loss left out
    assert by_node["cut"].redundant is True            # redundant for every loss, shown or not
    assert by_node["inner"].redundant is False
    assert [(f.rule, f.node) for f in report.findings] == [("GF106", "cut")]


def test_counterfactual_norm_and_cut_norm(write_model):
    report = analyze(write_model, """
        gradflow: 1
        params:
          x: {value: 2.0}
          y: {value: 3.0}
        graph:
          z: x * x + stop_gradient(y) * x
        losses: [z]
    """)
    assert report.pair("x", "z").counterfactual_norm == pytest.approx(7.0)
    assert report.pair("y", "z").counterfactual_norm == pytest.approx(2.0)
    [stop] = report.stops
    assert stop.cuts["z"]["cut_norm"] == pytest.approx(2.0)


def test_no_counterfactual_leaves_numbers_null(write_model):
    report = analyze(write_model, """
        gradflow: 1
        params:
          x: {value: 2.0}
        graph:
          z: stop_gradient(x) * x
        losses: [z]
    """, counterfactual=False)
    assert report.pair("x", "z").counterfactual_norm is None
    assert report.stops[0].cuts["z"]["cut_norm"] is None


def test_gf102_names_why_for_each_loss(write_model):
    report = analyze(write_model, """
        gradflow: 1
        params:
          w: {shape: [3], init: ones}
          v: {shape: [3], init: ones}
        graph:
          l1: sum(stop_gradient(w) * v)
          l2: sum(v)
        losses: [l1, l2]
    """)
    [finding] = [f for f in report.findings if f.rule == "GF102"]
    assert finding.param == "w" and finding.line == 3
    assert finding.message.endswith("from l1, blocked by stop_gradient in l1 (line 6:11); no path leads to l2")


def test_gf102_names_the_losses_with_no_path_together_after_the_cut_and_shows_the_cut(write_model):
    report = analyze(write_model, """
        gradflow: 1
        params:
          w: {shape: [3], init: ones}
          v: {shape: [3], init: ones}
        graph:
          l1: sum(v)
          l2: sum(v * v)
          l3: sum(round(w) * v)
          l4: sum(v * 3)
        losses: [l1, l2, l3, l4]
    """)
    [finding] = [f for f in report.findings if f.rule == "GF102"]
    assert finding.message == ("w receives gradient from no loss: from l3, blocked by round in l3 (line 8:11); "
                               "no path leads to l1, l2 and l4")
    assert finding.command.endswith(" w --loss l3")
