"""The tape: iterative sweeps, lazy against eager, cuts, counterfactual passes, unbroadcast."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from gradflow.engine import OPS, Tape, gc_paused, quiet, unbroadcast
from gradflow.errors import ShapeError
from test_ops import CASES  # pytest puts this directory on sys.path


def test_tape_runs_a_million_op_chain_forward_and_backward():
    # Python's cycle collector would add seconds here, walking a million live
    # nodes again and again; the engine's own cost is what this test is about.
    gc.disable()
    try:
        tape = Tape()
        x = tape.param(np.array(0.5))
        h, neg, scale = x, OPS["neg"], OPS["grad_scale"]
        for i in range(1_000_000):
            h = tape.apply(neg, h) if i % 1000 else tape.apply(scale, h, s=1.0)
        grads = tape.backward(h)
        assert h.index == 1_000_000 and float(h.value) == 0.5
        assert float(grads[x.index]) == 1.0  # an even number of negations
        tape.nodes.clear()  # no cycle left: the nodes go by reference counting
    finally:
        gc.enable()


@pytest.mark.parametrize("pause", [gc_paused, quiet])
@pytest.mark.parametrize("was_enabled", [True, False])
def test_sweeps_pause_the_collector_and_restore_it_even_on_errors(pause, was_enabled):
    (gc.enable if was_enabled else gc.disable)()
    try:
        with pause():
            assert not gc.isenabled()
            with pause():          # nested: the inner block leaves the outer's pause alone
                pass
            assert not gc.isenabled()
        assert gc.isenabled() == was_enabled
        with pytest.raises(ZeroDivisionError):
            with pause():
                1 / 0
        assert gc.isenabled() == was_enabled
    finally:
        gc.enable()


def all_cases():
    for name, cases in CASES.items():
        for case in cases:
            yield pytest.param(name, case, id=f"{name}-{case.id}")


@pytest.mark.parametrize("name,case", list(all_cases()))
def test_lazy_tape_agrees_with_eager_and_run_fills_the_same_values(name, case):
    arrays = [np.asarray(a) for a in case.make(np.random.default_rng(0))]
    eager_tape, lazy_tape = Tape(), Tape(eager=False)
    eager = eager_tape.apply(name, *[eager_tape.param(a) if a.dtype.kind == "f" else eager_tape.leaf(a)
                                     for a in arrays], **case.attrs)
    inputs = [lazy_tape.param(shape=a.shape) if a.dtype.kind == "f" else lazy_tape.leaf(shape=a.shape, dtype=a.dtype)
              for a in arrays]
    lazy = lazy_tape.apply(name, *inputs, **case.attrs)
    assert (lazy.shape, lazy.dtype, lazy.requires_grad) == (eager.shape, eager.dtype, eager.requires_grad)
    for x, a in zip(inputs, arrays):
        x.value = a
    lazy_tape.run()
    np.testing.assert_array_equal(lazy.value, eager.value)
    assert lazy.value.dtype == eager.value.dtype


def test_backward_leaves_unreached_and_cut_nodes_none():
    tape = Tape()
    a, b, unused = tape.param(np.ones(3)), tape.param(np.ones(3)), tape.param(np.ones(3))
    loss = tape.apply("sum", a * tape.apply("stop_gradient", b))
    grads = tape.backward(loss)
    np.testing.assert_array_equal(grads[a.index], np.ones(3))
    assert grads[b.index] is None and grads[unused.index] is None


def test_backward_through_passes_the_gradient_across_a_stop():
    tape = Tape()
    a, b = tape.param(np.full(3, 2.0)), tape.param(np.full(3, 3.0))
    stop = tape.apply("detach", b)
    loss = tape.apply("sum", a * stop)
    assert stop.op.name == "stop_gradient" and stop.op.kind == "stop"
    grads = tape.backward(loss, through={stop.index})
    np.testing.assert_array_equal(grads[b.index], np.full(3, 2.0))


def test_implicit_cut_keeps_the_path_but_passes_no_gradient():
    tape = Tape()
    w = tape.param(np.array([1.0, -1.0]))
    mask = tape.apply("greater", w, 0.0)
    loss = tape.apply("sum", mask * 3.0)
    assert mask.requires_grad and mask.op.kind == "implicit"  # the analysis sees a path here
    assert tape.backward(loss)[w.index] is None
    assert tape.backward(loss, through={mask.index})[w.index] is not None


def test_argmax_output_is_an_integer_that_carries_no_gradient():
    tape = Tape()
    w = tape.param(np.array([1.0, 3.0]))
    i = tape.apply("argmax", w)
    assert i.dtype == np.int64 and not i.requires_grad


def test_where_output_dtype_comes_from_its_values_not_its_condition():
    for tape in (Tape(), Tape(eager=False)):
        cond = tape.leaf(np.array([1.0, 0.0])) if tape.eager else tape.leaf(shape=(2,))
        a = tape.leaf(np.array([1, 2])) if tape.eager else tape.leaf(shape=(2,), dtype=np.int64)
        assert tape.apply("where", cond, a, a).dtype == np.int64


def test_apply_turns_numbers_into_constants():
    tape = Tape()
    x = tape.param(np.array([1.0, 2.0]))
    y = tape.apply("mul", x, 3)
    assert y.parents[1].op is None and not y.parents[1].requires_grad
    np.testing.assert_array_equal(y.value, [3.0, 6.0])


def test_apply_refuses_unknown_and_missing_attributes():
    tape = Tape()
    x = tape.leaf(np.ones((2, 2)))
    with pytest.raises(TypeError, match="unexpected argument 'axes'"):
        tape.apply("sum", x, axes=0)
    with pytest.raises(TypeError, match="missing argument 'shape'"):
        tape.apply("reshape", x)


def test_plain_ops_skip_binding_yet_still_refuse_attributes():
    # op.plain lets apply skip binding and dtype checks: an attribute given to a plain op is
    # still refused, and an op with integer inputs still checks them.
    tape = Tape()
    x = tape.leaf(np.ones((2, 2)))
    assert tape.apply("sin", x).attrs == {}
    with pytest.raises(TypeError, match="sin\\(\\) got an unexpected argument 'axis'"):
        tape.apply("sin", x, axis=0)
    with pytest.raises(ShapeError, match="must be an integer tensor"):
        tape.apply("take", x, tape.leaf(np.zeros(2)), axis=0)


def test_eager_apply_reports_bad_shapes_as_shape_errors():
    tape = Tape()
    x = tape.leaf(np.ones((3, 4)))
    with pytest.raises(ShapeError, match=r"^sum: axis 2 is out of range for shape \[3, 4\]$"):
        tape.apply("sum", x, axis=2)
    with pytest.raises(ShapeError, match=r"^matmul of \[3, 4\] and \[3, 4\]: 4 != 3$"):
        tape.apply("matmul", x, x)


def test_lazy_apply_names_the_op_in_shape_errors():
    tape = Tape(eager=False)
    with pytest.raises(ShapeError, match="^add: cannot broadcast"):
        tape.apply("add", tape.leaf(shape=(3,)), tape.leaf(shape=(4,)))


@pytest.mark.parametrize("grad_shape,shape,expected", [
    ((3, 4), (4,), np.full(4, 3.0)), ((3, 4), (1, 4), np.full((1, 4), 3.0)),
    ((3, 4), (3, 1), np.full((3, 1), 4.0)), ((2, 3, 4), (), 24.0), ((3, 4), (3, 4), np.ones((3, 4))),
])
def test_unbroadcast_sums_back_to_the_input_shape(grad_shape, shape, expected):
    out = unbroadcast(np.ones(grad_shape), shape)
    assert np.shape(out) == shape
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("grad_shape,shape", [
    ((3, 4), (4,)), ((3, 4), (1, 4)), ((3, 4), (3, 1)), ((2, 3, 4), ()), ((3, 4), (3, 4)), ((5, 3, 4), (3, 1)),
    ((0, 4), (1, 4)), ((2, 0), (0,)),
])
def test_unbroadcast_keeps_leading_rows_and_sums_each_as_alone(grad_shape, shape):
    grad = np.random.default_rng(0).normal(size=(3, *grad_shape))
    out = unbroadcast(grad, shape, rows=1)
    assert out.shape == (3, *shape)
    for row, alone in zip(out, grad):
        np.testing.assert_array_equal(row, unbroadcast(alone, shape))


def test_backward_drops_op_gradients_unless_kept():
    tape = Tape()
    w = tape.param(np.ones(3))
    h = tape.apply("tanh", w)
    loss = tape.apply("sum", h)
    lean = tape.backward(loss)
    assert lean[h.index] is None and lean[loss.index] is None
    kept = tape.backward(loss, keep=True)
    np.testing.assert_allclose(kept[h.index], np.ones(3))
    np.testing.assert_allclose(lean[w.index], kept[w.index])


def test_concat_gives_each_input_its_own_slice_with_offsets_worked_out_once_per_node():
    """Two concats of different layouts on one tape, hundreds of inputs each: the offsets
    each node's rules share are that node's, and every input gets the slice it filled."""
    rng = np.random.default_rng(3)
    tape = Tape()
    wide = [tape.param(rng.normal(size=(2, 1 + k % 3))) for k in range(300)]
    tall = [tape.param(rng.normal(size=(1 + k % 4, 5))) for k in range(200)]
    joined_wide = tape.apply("concat", *wide, axis=-1)
    joined_tall = tape.apply("concat", *tall, axis=0)
    weights_wide = tape.leaf(rng.normal(size=joined_wide.shape))
    weights_tall = tape.leaf(rng.normal(size=joined_tall.shape))
    loss = tape.apply("sum", joined_wide * weights_wide) + tape.apply("sum", joined_tall * weights_tall)
    grads = tape.backward(loss)
    start = 0
    for x in wide:
        width = x.shape[1]
        np.testing.assert_array_equal(grads[x.index], weights_wide.value[:, start:start + width])
        start += width
    start = 0
    for x in tall:
        np.testing.assert_array_equal(grads[x.index], weights_tall.value[start:start + x.shape[0]])
        start += x.shape[0]
    assert start == joined_tall.shape[0]
