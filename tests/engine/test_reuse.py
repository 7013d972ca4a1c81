"""Tape.run writing an op's result over an input that no one needs after it: what Op.reads
promises, and a reusing run against a run that allocates every value; a rule that computes
in one temporary against its formula."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import gradflow.engine.tape as tape_module
from gradflow.engine import OPS, Tape, kernels
from gradflow.engine.kernels import tanh_vjp
from test_ops import all_cases, eager_output  # pytest puts this directory on sys.path

NARROW = [p for p in all_cases() if OPS[p.values[0]].reads != ("ans", "inputs")]


def test_some_ops_promise_to_read_less_and_may_reuse():
    assert NARROW and {"add", "tanh"} <= {name for name, op in OPS.items() if op.reuses}
    assert not OPS["mul"].reuses and not OPS["sigmoid"].reuses   # reads inputs; not a ufunc


@pytest.mark.parametrize("name,case", NARROW)
def test_rules_do_not_read_what_their_op_says_they_do_not(name, case):
    """A value no rule reads may be gone by the backward sweep: rules given None for it agree."""
    op, rng = OPS[name], np.random.default_rng(0)
    arrays = [np.asarray(a) for a in case.make(rng)]
    ans = eager_output(name, arrays, case.attrs).value
    g, attrs = rng.normal(size=np.shape(ans)), op.bind_attrs(case.attrs)
    blind_ans = ans if "ans" in op.reads else None
    blind_inputs = arrays if "inputs" in op.reads else [None] * len(arrays)
    for rule in op.vjps_for(len(arrays)):
        if rule is not None:
            np.testing.assert_array_equal(rule(g, blind_ans, *blind_inputs, **attrs), rule(g, ans, *arrays, **attrs))


def read_only_negative(a):
    out = -a
    out.flags.writeable = False
    return out


def recorded(dtype):
    """A lazy tape with every case for and against reuse; (tape, named nodes, loss)."""
    rng = np.random.default_rng(1)
    tape = Tape(dtype, eager=False)
    x = tape.leaf(rng.normal(size=(64, 256)))
    w, v, b = (tape.param(rng.normal(size=s) / 16) for s in ((256, 256), (256, 256), (256,)))
    n = {"m": x @ w}                                  # read by add alone: its buffer is reused
    n["a"] = n["m"] + b                               # and this one by tanh
    n["h"] = tape.apply("tanh", n["a"])               # read back by tanh's rule: held
    n["twice"] = (n["h"] + b) @ v                     # two readers
    n["u"], n["t"] = n["twice"] + b, n["twice"] * 2.0
    n["p"] = x @ v
    n["stop"] = tape.apply("stop_gradient", n["p"])   # shares p's array; a cut, never written over
    n["neg"] = -n["stop"]
    n["q"] = x @ w
    passes = dataclasses.replace(OPS["grad_reverse"], name="passes", reads=())
    n["same"] = tape.apply(passes, n["q"]) + b        # passes hands q's array on: not its own to give
    cut = dataclasses.replace(OPS["stop_gradient"], name="cut", forward=np.positive, reads=())
    n["cut"] = tape.apply(cut, x @ w)                 # a cut holds its value (gradcheck reruns around it)
    n["after_cut"] = n["cut"] + b
    flipped = dataclasses.replace(OPS["neg"], name="flipped", forward=lambda a: a[::-1], reads=())
    n["view"] = tape.apply(flipped, x @ v) + b        # a view of another value's array: not its own
    frozen = dataclasses.replace(OPS["neg"], name="frozen", forward=read_only_negative, reads=())
    n["frozen"] = tape.apply(frozen, x @ v) + b       # an array its maker made read-only
    n["kept"] = x @ v
    n["after_kept"] = n["kept"] - b
    n["preset"] = x @ w                               # a value given before the run: not the run's own
    n["after_preset"] = n["preset"] + b
    n["int"] = tape.leaf(np.arange(256), dtype=np.int64)
    n["mixed"] = x @ w
    n["with_int"] = n["mixed"] + n["int"]             # an input of another dtype: no reuse
    n["second"] = x @ v
    n["from_second"] = b - n["second"]                # written over as the second input, b broadcast
    n["to_exp"], n["to_neg"] = x @ w, x @ v
    n["exp"] = tape.apply("exp", n["to_exp"])         # written over; exp's rule reads its own value
    n["neg_of"] = -n["to_neg"]
    parts = [n[k] for k in ("u", "t", "neg", "same", "after_cut", "view", "frozen", "after_kept", "after_preset", "with_int",
                                  "from_second", "exp", "neg_of")]
    loss = tape.apply("mean", tape.apply("concat", *parts, axis=0))
    tape.keep_values = {n["kept"].index}
    n["preset"].value = np.full(n["preset"].shape, 0.5, dtype)
    return tape, n, loss


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_run_that_reuses_buffers_gives_what_a_fresh_run_gives(monkeypatch, dtype):
    monkeypatch.setattr(tape_module, "REUSE_BYTES", 2 ** 62)
    fresh, names, loss = recorded(dtype)
    fresh.run()
    assert all(node.value is not None for node in fresh.nodes)
    monkeypatch.setattr(tape_module, "REUSE_BYTES", 0)
    reused, _, reused_loss = recorded(dtype)
    reused.run()
    dropped = {k for k, node in names.items() if reused.nodes[node.index].value is None}
    assert dropped == {"m", "a", "second", "to_exp", "to_neg"}
    for before, after in zip(fresh.nodes, reused.nodes):
        if after.value is not None:
            np.testing.assert_array_equal(after.value, before.value)
            assert after.value.dtype == before.value.dtype
    for want, got in zip(fresh.backward(loss, keep=True), reused.backward(reused_loss, keep=True)):
        assert (want is None) == (got is None)
        if want is not None:
            np.testing.assert_array_equal(got, want)


def test_run_names_the_node_whose_forward_failed_after_reusing_buffers(monkeypatch):
    monkeypatch.setattr(tape_module, "REUSE_BYTES", 0)
    tape = Tape(eager=False)
    x, w = tape.leaf(np.ones((4, 3))), tape.param(np.ones((3, 3)))
    h = tape.apply("tanh", x @ w + 1.0)
    bad = tape.apply("take", h, tape.leaf(np.array([7])), axis=0)
    with pytest.raises(IndexError):
        tape.run()
    assert tape.failed is bad
    assert tape.nodes[h.parents[0].index].value is None   # a reused buffer: None, yet not the one named


@pytest.mark.parametrize("g_dtype,ans_dtype,g_shape,ans_shape", [
    (np.float64, np.float64, (3, 4), (3, 4)), (np.float32, np.float32, (3, 4), (3, 4)),
    (np.float64, np.float32, (3, 4), (3, 4)), (np.float32, np.float64, (3, 4), (3, 4)),
    (np.float64, np.float64, (), ()), (np.float64, np.float64, (3, 4), (1, 4)),
    (np.float32, np.float32, (128, 160), (128, 160)),
])
@pytest.mark.parametrize("in_place_from", [0, 1 << 14])   # every size, and only large ones
def test_tanh_rule_in_one_temporary_gives_the_numbers_of_its_formula(g_dtype, ans_dtype, g_shape, ans_shape,
                                                                     in_place_from, monkeypatch):
    monkeypatch.setattr(kernels, "IN_PLACE", in_place_from)
    rng = np.random.default_rng(2)
    ans = np.tanh(rng.normal(size=ans_shape) * 3).astype(ans_dtype)
    g = rng.normal(size=g_shape).astype(g_dtype)
    if g.ndim:
        g[0, :2] = np.inf, np.nan
    before = ans.copy()
    got, want = tanh_vjp(g, ans, None), g * (1 - ans * ans)
    assert got.dtype == want.dtype and np.shape(got) == np.shape(want)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ans, before)
