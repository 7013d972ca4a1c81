"""The numerical conventions of the op table, against hand-made expectations.

Ties, broadcasting of ``where``, reductions over no axes, integer tensors,
stability at +-1000, float32 end to end, and the PyTorch-style definitions
(gelu, var, layer_norm, dropout, losses) that finite differences cannot pin down.
"""

from __future__ import annotations

import numpy as np
import pytest

from gradflow.engine import OPS, Tape
from gradflow.errors import ShapeError
from test_ops import CASES  # pytest puts this directory on sys.path


def grads_of(name, *arrays, **attrs):
    """(value, [gradient per input]) of sum(op(*arrays)) on a float64 tape."""
    tape = Tape()
    inputs = [tape.param(a) if np.asarray(a).dtype.kind == "f" else tape.leaf(a) for a in arrays]
    out = tape.apply(name, *inputs, **attrs)
    grads = tape.backward(tape.apply("sum", out))
    return out.value, [grads[x.index] for x in inputs]


# ---------------------------------------------------------------- ties
def test_max_ties_give_the_gradient_to_the_first_index():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])
    value, (g,) = grads_of("max", x, axis=1)
    np.testing.assert_array_equal(value, [3.0, 2.0])
    np.testing.assert_array_equal(g, [[0, 1, 0], [1, 0, 0]])
    _, (g_all,) = grads_of("max", np.array([5.0, 1.0, 5.0]))
    np.testing.assert_array_equal(g_all, [1, 0, 0])


def test_min_ties_give_the_gradient_to_the_first_index():
    x = np.array([[1.0, 0.0, 0.0], [2.0, 2.0, 3.0]])
    _, (g,) = grads_of("min", x, axis=-1)
    np.testing.assert_array_equal(g, [[0, 1, 0], [1, 0, 0]])
    _, (g0,) = grads_of("min", x, axis=0)
    np.testing.assert_array_equal(g0, [[1, 1, 1], [0, 0, 0]])


@pytest.mark.parametrize("name,expected", [("argmax", [1, 0]), ("argmin", [0, 2])])
def test_argmax_argmin_ties_go_to_the_first_index(name, expected):
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]]) if name == "argmax" else \
        np.array([[1.0, 3.0, 1.0], [2.0, 2.0, 0.0]])
    tape = Tape()
    out = tape.apply(name, tape.leaf(x), axis=1)
    np.testing.assert_array_equal(out.value, expected)
    assert out.dtype == np.int64


def test_max_pool2d_ties_give_the_gradient_to_the_first_in_the_window():
    x = np.array([[[[1.0, 1.0], [1.0, 0.0]]]])
    value, (g,) = grads_of("max_pool2d", x, kernel=2)
    np.testing.assert_array_equal(value, [[[[1.0]]]])
    np.testing.assert_array_equal(g, [[[[1, 0], [0, 0]]]])


def test_max_pool2d_overlapping_windows_add_up():
    x = np.array([[0.0, 0.0, 0.0], [0.0, 9.0, 0.0], [0.0, 0.0, 0.0]])
    _, (g,) = grads_of("max_pool2d", x, kernel=2, stride=1)
    assert g[1, 1] == 4 and g.sum() == 4  # the centre wins all four windows


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_split_the_gradient_on_ties(name):
    a, b = np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 5.0])
    _, (ga, gb) = grads_of(name, a, b)
    if name == "maximum":
        np.testing.assert_array_equal(ga, [0.5, 1, 0])
        np.testing.assert_array_equal(gb, [0.5, 0, 1])
    else:
        np.testing.assert_array_equal(ga, [0.5, 0, 1])
        np.testing.assert_array_equal(gb, [0.5, 1, 0])


# ---------------------------------------------------------------- where, axes, integers
def test_where_broadcasts_condition_and_values():
    cond = np.array([[1.0, 0.0, 1.0]])                 # [1, 3]
    a = np.array([[1.0], [2.0]])                       # [2, 1]
    b = np.array(10.0)                                 # []
    value, (gc, ga, gb) = grads_of("where", cond, a, b)
    np.testing.assert_array_equal(value, [[1, 10, 1], [2, 10, 2]])
    assert gc is None
    np.testing.assert_array_equal(ga, [[2], [2]])      # two of three columns pick a
    np.testing.assert_array_equal(gb, 2.0)             # one column, two rows pick b


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "logsumexp", "var", "norm"])
def test_reduction_over_empty_axes_reduces_nothing(name):
    x = np.array([[1.0, -2.0], [3.0, 0.5]])
    value, (g,) = grads_of(name, x, axis=())
    expected = {"var": np.zeros_like(x), "norm": np.abs(x)}.get(name, x)
    np.testing.assert_allclose(value, expected)
    np.testing.assert_allclose(g, {"var": np.zeros_like(x), "norm": np.sign(x)}.get(name, np.ones_like(x)))


def test_integer_tensors_never_receive_gradient():
    tape = Tape()
    w = tape.param(np.ones((3, 4)))
    idx = tape.leaf(np.array([0, 2, 1]))
    scale = tape.leaf(np.array(2))
    picked = tape.apply("take_along_axis", w, tape.apply("expand_dims", idx, axis=1), axis=1)
    loss = tape.apply("sum", picked * scale) + tape.apply("cross_entropy", w, idx)
    loss = loss + tape.apply("sum", tape.apply("one_hot", idx, n=4)) + tape.apply("sum", w * idx[0])
    grads = tape.backward(loss)
    assert not idx.requires_grad and not scale.requires_grad
    assert grads[idx.index] is None and grads[scale.index] is None
    assert grads[w.index] is not None


def test_integer_inputs_are_refused_when_float():
    tape = Tape()
    with pytest.raises(Exception, match="integer tensor"):
        tape.apply("take", tape.leaf(np.ones(4)), tape.leaf(np.array([0.0, 1.0])), axis=0)


# ---------------------------------------------------------------- stability
BIG = np.array([[1000.0, -1000.0, 0.0], [-1000.0, -1000.0, 1000.0]])


@pytest.mark.parametrize("name,extra,attrs", [
    ("softmax", (), {}), ("log_softmax", (), {}), ("logsumexp", (), {"axis": -1}),
    ("logsumexp", (), {}), ("sigmoid", (), {}), ("softplus", (), {}),
    ("cross_entropy", (np.array([1, 0]),), {}),
])
def test_stable_ops_stay_finite_at_plus_minus_1000(name, extra, attrs):
    with np.errstate(over="raise", divide="raise", invalid="raise"):  # not even a warning
        value, grads = grads_of(name, BIG, *extra, **attrs)
    assert np.all(np.isfinite(value))
    assert np.all(np.isfinite(grads[0]))


def test_stable_ops_give_exact_values_at_plus_minus_1000():
    np.testing.assert_allclose(grads_of("softplus", BIG)[0], np.where(BIG == 0, np.log(2), np.maximum(BIG, 0)))
    np.testing.assert_allclose(grads_of("sigmoid", BIG)[0], np.where(BIG == 0, 0.5, BIG > 0))
    np.testing.assert_allclose(grads_of("logsumexp", BIG, axis=-1)[0], [1000.0, 1000.0])
    np.testing.assert_allclose(grads_of("log_softmax", BIG)[0][0], [0.0, -2000.0, -1000.0])
    np.testing.assert_allclose(grads_of("cross_entropy", BIG, np.array([1, 2]))[0], 1000.0)


def test_binary_cross_entropy_of_saturated_sigmoid_is_finite():
    tape = Tape()
    z = tape.param(np.array([1000.0, -1000.0, 1000.0]))
    loss = tape.apply("binary_cross_entropy", tape.apply("sigmoid", z), tape.leaf(np.array([0.0, 1.0, 1.0])))
    grads = tape.backward(loss)
    np.testing.assert_allclose(loss.value, 200 / 3)  # two wrong predictions, logs clamped at -100
    assert np.all(np.isfinite(grads[z.index]))


# ---------------------------------------------------------------- float32
def float_cases():
    for name, cases in CASES.items():
        for case in cases:
            yield pytest.param(name, case, id=f"{name}-{case.id}")


@pytest.mark.parametrize("name,case", list(float_cases()))
def test_float32_tape_stays_float32_in_values_and_gradients(name, case):
    arrays = [np.asarray(a) for a in case.make(np.random.default_rng(0))]
    tape = Tape(np.float32)
    inputs = [tape.param(a) if a.dtype.kind == "f" else tape.leaf(a) for a in arrays]
    out = tape.apply(name, *inputs, **case.attrs)
    lazy_tape = Tape(np.float32, eager=False)
    lazy = lazy_tape.apply(name, *[lazy_tape.leaf(shape=a.shape, dtype=a.dtype) for a in arrays], **case.attrs)
    assert lazy.dtype == out.dtype
    if OPS[name].out == "int":
        return
    assert out.value.dtype == np.float32
    loss = tape.apply("sum", tape.apply("mul", out, tape.constant(np.full(out.shape, 0.5))))
    grads = tape.backward(loss)
    assert all(np.asarray(g).dtype == np.float32 for g in grads if g is not None)


# ---------------------------------------------------------------- definitions
def test_gelu_is_the_tanh_approximation():
    value, _ = grads_of("gelu", np.array([1.0, -0.5]))
    np.testing.assert_allclose(value, [0.8411919906082768, -0.15428599017485905], rtol=1e-12)


def test_var_is_the_population_variance():
    value, _ = grads_of("var", np.array([1.0, 2.0, 3.0, 4.0]))
    assert value == pytest.approx(1.25)


def test_norm_is_l2_with_zero_gradient_at_zero():
    value, (g,) = grads_of("norm", np.array([[3.0, 4.0], [0.0, 0.0]]), axis=1)
    np.testing.assert_allclose(value, [5.0, 0.0])
    np.testing.assert_allclose(g, [[0.6, 0.8], [0.0, 0.0]])


def test_layer_norm_normalises_the_last_axis_with_eps():
    x = np.array([[0.0, 2.0], [5.0, 5.0]])
    value, _ = grads_of("layer_norm", x, np.array([1.0, 2.0]), np.array([0.0, 1.0]))
    s = 1 / np.sqrt(1 + 1e-5)
    np.testing.assert_allclose(value, [[-s, 2 * s + 1], [0.0, 1.0]])


def test_losses_average():
    a, b = np.array([[1.0, 2.0], [3.0, 4.0]]), np.zeros((2, 2))
    assert grads_of("mse", a, b)[0] == pytest.approx(30 / 4)
    p, y = np.array([0.5, 0.25]), np.array([1.0, 0.0])
    assert grads_of("binary_cross_entropy", p, y)[0] == pytest.approx(-(np.log(0.5) + np.log(0.75)) / 2)
    logits = np.log(np.array([[0.5, 0.5], [0.25, 0.75]]))
    assert grads_of("cross_entropy", logits, np.array([0, 1]))[0] == pytest.approx(
        -(np.log(0.5) + np.log(0.75)) / 2)


def test_dropout_is_seeded_stateless_and_inverted():
    x = np.ones((200, 50))
    first, (g,) = grads_of("dropout", x, p=0.25, seed=3)
    again, _ = grads_of("dropout", x, p=0.25, seed=3)
    other, _ = grads_of("dropout", x, p=0.25, seed=4)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    assert set(np.unique(first)) == {0.0, 1 / 0.75}
    assert abs((first == 0).mean() - 0.25) < 0.02
    np.testing.assert_array_equal(g, first)  # the vjp recomputes the same mask and scale


# ---------------------------------------------------------------- random draws
@pytest.mark.parametrize("name,inputs,attrs", [
    ("bernoulli", [np.full((400, 50), 0.3)], {}),
    ("normal", [np.zeros((400, 50)), np.ones(50)], {}),
    ("multinomial", [np.tile([1.0, 2.0, 0.0, 5.0], (400, 1))], {"n": 50, "replacement": True}),
    ("multinomial", [np.tile([1.0, 2.0, 0.0, 5.0], (400, 1))], {"n": 3})])
def test_draws_are_seeded_stateless_and_pass_no_gradient(name, inputs, attrs):
    first, grads = grads_of(name, *inputs, **attrs, seed=3)
    again, _ = grads_of(name, *inputs, **attrs, seed=3)
    other, _ = grads_of(name, *inputs, **attrs, seed=4)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    assert grads == [None] * len(inputs) and OPS[name].kind == "implicit"


def test_bernoulli_is_one_with_probability_p():
    p = np.tile([0.0, 0.1, 0.5, 0.9, 1.0], (20_000, 1))
    draw, _ = grads_of("bernoulli", p, seed=0)
    assert set(np.unique(draw)) == {0.0, 1.0} and draw.dtype == np.float64
    np.testing.assert_array_equal(draw[:, [0, 4]], [[0.0, 1.0]] * 20_000)
    np.testing.assert_allclose(draw.mean(axis=0), p[0], atol=0.015)


def test_normal_draws_mean_plus_std_times_noise():
    mean, std = np.array([-3.0, 0.0, 10.0]), np.array([[0.5], [2.0]])
    draws = np.stack([grads_of("normal", mean, std, seed=s)[0] for s in range(4000)])
    assert draws.shape == (4000, 2, 3)
    np.testing.assert_allclose(draws.mean(axis=0), np.broadcast_to(mean, (2, 3)), atol=0.15)
    np.testing.assert_allclose(draws.std(axis=0), np.broadcast_to(std, (2, 3)), rtol=0.05)
    np.testing.assert_array_equal(grads_of("normal", mean, np.zeros(3))[0], mean)   # no spread: the mean itself


def test_multinomial_with_replacement_draws_each_class_in_proportion_to_its_weight():
    weights = np.array([[1.0, 2.0, 0.0, 5.0], [0.0, 0.0, 3.0, 0.0]])   # unnormalised, as torch takes them
    draw, _ = grads_of("multinomial", weights, n=40_000, replacement=True, seed=0)
    assert draw.shape == (2, 40_000) and draw.dtype == np.int64
    np.testing.assert_allclose(np.bincount(draw[0], minlength=4) / 40_000, weights[0] / 8, atol=0.01)
    np.testing.assert_array_equal(draw[1], 2)   # the one class with weight


def test_multinomial_with_replacement_draws_the_first_class_whose_running_sum_passes_the_draw():
    # each draw is the number of running sums at or below a uniform draw times the row's total
    weights = np.random.default_rng(1).random((3, 2, 5)) * np.array([1.0, 0.0, 2.0, 0.0, 1.0])
    drawn, _ = grads_of("multinomial", weights, n=7, replacement=True, seed=4)
    running = np.cumsum(weights, axis=-1)
    u = np.random.default_rng(4).random((6, 7)).reshape(3, 2, 7) * running[..., -1:]
    np.testing.assert_array_equal(drawn, np.minimum(np.sum(running[..., None, :] <= u[..., None], axis=-1), 4))


def test_multinomial_without_replacement_draws_distinct_classes_first_in_proportion():
    weights = np.array([1.0, 2.0, 0.0, 5.0])
    draws = np.stack([grads_of("multinomial", weights, n=3, seed=s)[0] for s in range(6000)])
    assert all(len(set(row)) == 3 and 2 not in row for row in draws)   # distinct; a zero weight never drawn
    np.testing.assert_allclose(np.bincount(draws[:, 0], minlength=4) / 6000, weights / 8, atol=0.02)
    np.testing.assert_allclose(np.bincount(draws[:, 1], minlength=4) / 6000,   # second, given the first
                               [sum(weights[f] / 8 * weights[k] / (8 - weights[f]) for f in range(4) if f != k)
                                for k in range(4)], atol=0.02)


@pytest.mark.parametrize("name,inputs,message", [
    ("bernoulli", [np.array([0.5, 1.5])], r"probabilities must be in \[0, 1\]"),
    ("bernoulli", [np.array([0.5, np.nan])], r"probabilities must be in \[0, 1\]"),
    ("normal", [np.zeros(2), np.array([1.0, -0.5])], "std must be >= 0"),
    ("normal", [np.zeros(2), np.array([1.0, np.nan])], "std must be >= 0")])
def test_draws_refuse_what_torch_refuses(name, inputs, message):
    with pytest.raises(ValueError, match=message):
        grads_of(name, *inputs)


@pytest.mark.parametrize("weights", [[0.5, -0.1, 1.0], [0.5, np.nan, 1.0], [0.5, np.inf, 1.0], [0.0, 0.0, 0.0]])
def test_multinomial_refuses_weights_that_are_no_distribution_as_torch_does(weights):
    with pytest.raises(ValueError, match="weights must be finite and >= 0, with at least one above 0 in each row"):
        grads_of("multinomial", np.array([[1.0, 1.0, 1.0], weights]), n=2, replacement=True)


@pytest.mark.parametrize("attrs,message", [
    ({"n": 5}, "multinomial cannot draw 5 of 4 classes without replacement"),
    ({"n": 0}, "multinomial draws n >= 1 classes, got 0"),
    ({"n": 2.0, "replacement": True}, "multinomial draws n >= 1 classes, got 2.0")])
def test_multinomial_shape_rule_refuses_draws_it_cannot_make(attrs, message):
    tape = Tape(eager=False)
    with pytest.raises(ShapeError, match=message):
        tape.apply("multinomial", tape.leaf(shape=(3, 4)), **attrs)


def test_conv2d_matches_a_direct_loop():
    rng = np.random.default_rng(1)
    x, w = rng.normal(size=(2, 3, 6, 5)), rng.normal(size=(4, 3, 3, 2))
    value, _ = grads_of("conv2d", x, w, stride=(2, 1), padding=1)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = np.zeros(value.shape)
    for n, o, i, j in np.ndindex(*value.shape):
        expected[n, o, i, j] = np.sum(xp[n, :, 2 * i:2 * i + 3, j:j + 2] * w[o])
    np.testing.assert_allclose(value, expected)


def test_comparisons_give_float_zero_or_one():
    tape = Tape()
    out = tape.apply("less", tape.leaf(np.array([1.0, 2.0])), tape.leaf(np.array([2.0, 2.0])))
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out.value, [1.0, 0.0])
