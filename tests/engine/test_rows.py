"""sweep_rows: one walk for many seeds gives each seed exactly what its own sweep gives.

Checked against ``Tape.sweep`` once per seed: for every op whose rules are called on
stacked rows (STACKABLE), on each of its gradient test cases, with nodes side by side
and a node reached by two seeds; and on graphs with shared trunks, parallel branches,
paths that meet again, rules called row by row, stops, and float32.
"""

from __future__ import annotations

import numpy as np
import pytest

from gradflow.engine import OPS, Tape, quiet
from gradflow.engine.rows import sweep_rows
from gradflow.engine.stacking import STACKABLE, kind_of, stacks
from gradflow.engine.waves import calls, plan
from test_ops import CASES  # pytest puts this directory on sys.path


def every_index(tape: Tape) -> list:
    return list(range(len(tape.nodes) - 1, -1, -1))


def assert_rows_match_own_sweeps(tape: Tape, seeds: list, exact: bool = True) -> None:
    """Each seed's rows at the leaves equal a sweep of its own, bit for bit (or to 1e-12), with
    packs that nothing else meets passed straight to the next wave and with every pack slot by slot."""
    with quiet():
        walk = plan(tape.nodes, [node for _, node, _ in seeds], every_index(tape))
        for shared in (walk.shared, None):
            leaves = sweep_rows(tape.nodes, seeds, walk.waves, shared)
            assert_leaves_match_own_sweeps(tape, seeds, leaves, exact)


def assert_leaves_match_own_sweeps(tape: Tape, seeds: list, leaves: dict, exact: bool) -> None:
    with quiet():
        for key, node, g in seeds:
            own = tape.sweep(None, seeds={node: g})
            for leaf in (n for n in tape.nodes if n.op is None and n.requires_grad):
                rows = {k: row for keys, block, _ in leaves.get(leaf.index, ()) for k, row in zip(keys, block)}
                want = own[leaf.index] if leaf.index < len(own) else None
                if want is None:
                    assert key not in rows, (key, leaf)
                    continue
                assert rows[key].shape == leaf.shape and rows[key].dtype == want.dtype
                if exact:
                    np.testing.assert_array_equal(rows[key], want, err_msg=f"seed {key} at {leaf}")
                else:
                    np.testing.assert_allclose(rows[key], want, rtol=1e-12, atol=0, err_msg=f"seed {key} at {leaf}")


def stackable_cases():
    for name in sorted(STACKABLE):
        for case in CASES[name]:
            yield pytest.param(name, case, id=f"{name}-{case.id}")


def test_stackable_names_are_ops():
    assert STACKABLE <= set(OPS)


@pytest.mark.parametrize("shared", [False, True], ids=["own-inputs", "first-input-shared"])
@pytest.mark.parametrize("name,case", list(stackable_cases()))
def test_stacked_rules_give_each_row_what_its_own_sweep_gives(name, case, shared):
    rng = np.random.default_rng(1)
    tape, seeds = Tape(), []
    first_inputs = None
    for copy in range(3):                   # three nodes of one kind, side by side in one wave
        arrays = [np.asarray(a) for a in case.make(rng)]
        inputs = [tape.param(a) if a.dtype.kind == "f" else tape.leaf(a) for a in arrays]
        if shared and first_inputs is not None:
            inputs[0] = first_inputs[0]
        first_inputs = first_inputs or inputs
        node = tape.apply(name, *inputs, **case.attrs)
        for _ in range(2 if copy == 0 else 1):   # the first node is reached by two seeds
            seeds.append((len(seeds), node, rng.normal(size=node.shape)))
    assert_rows_match_own_sweeps(tape, seeds)


def test_matmul_stacks_only_between_matrices():
    tape = Tape()
    vec, mat = tape.param(np.ones(4)), tape.param(np.ones((4, 2)))
    assert not stacks(vec @ vec) and not stacks(vec @ mat) and stacks(tape.param(np.ones((3, 4))) @ mat)


def test_a_node_has_a_kind_of_its_own_exactly_where_its_rules_are_called_per_row():
    tape = Tape()
    vec, mat, wide = tape.param(np.ones(4)), tape.param(np.ones((4, 2))), tape.param(np.ones((3, 4)))
    nodes = [vec, vec @ vec, vec @ mat, mat @ tape.param(np.ones(2)), wide @ mat, vec * vec, tape.apply("tanh", vec),
             tape.apply("sum", wide), tape.apply("leaky_relu", vec, slope=0.1)]
    for node in nodes:
        alone = node.op is None or bool(node.attrs) or not stacks(node)
        assert (kind_of(node) == node.index) == alone, node


def branches(dtype=np.float64):
    """A trunk shared by parallel branches, a residual join, row-by-row rules and a stop."""
    rng = np.random.default_rng(2)
    tape = Tape(dtype=dtype)
    x = tape.leaf(rng.normal(size=(5, 4)))
    head, bias = tape.param(rng.normal(size=(4, 4))), tape.param(rng.normal(size=(4,)))
    base = tape.apply("tanh", tape.apply("matmul", x, head) + bias)
    seeds = []
    for k in range(4):
        w = tape.param(rng.normal(size=(4, 4)))
        h = tape.apply("tanh", tape.apply("matmul", base, w))
        h = h + tape.apply("sigmoid", h) * base                       # paths that meet again
        if k == 3:
            h = tape.apply("reshape", tape.apply("sum", h, axis=0, keepdims=True), shape=(4,)) * bias
        if k == 2:
            h = h + tape.apply("stop_gradient", tape.apply("exp", base))
        seeds += [(len(seeds), h, rng.normal(size=h.shape)), (len(seeds) + 1, h, rng.normal(size=h.shape))]
    seeds.append((len(seeds), base, rng.normal(size=base.shape)))   # a seed below the others
    return tape, seeds


def test_rows_through_trunks_branches_joins_and_stops_match_own_sweeps():
    tape, seeds = branches()
    assert_rows_match_own_sweeps(tape, seeds)


def test_one_array_seeded_at_many_nodes_gives_each_seed_what_its_own_sweep_gives():
    """Seeds of one kind that share one array are rows of one read-only broadcast of it."""
    tape, seeds = branches()
    shared = {}
    seeds = [(k, node, shared.setdefault(node.shape, g)) for k, node, g in seeds]
    assert len({id(g) for _, _, g in seeds}) < len(seeds)
    assert_rows_match_own_sweeps(tape, seeds)
    rng, tape = np.random.default_rng(3), Tape()
    x = tape.param(rng.normal(size=(3, 4)))
    tops = [tape.apply("tanh", x * tape.param(rng.normal(size=(3, 4)))) for _ in range(5)]
    g = rng.normal(size=(3, 4))
    assert_rows_match_own_sweeps(tape, [(k, top, g) for k, top in enumerate(tops + tops[:2])])


def test_rows_keep_a_float32_tape_float32():
    tape, seeds = branches(np.float32)
    seeds = [(k, node, g.astype(np.float32)) for k, node, g in seeds]
    assert_rows_match_own_sweeps(tape, seeds)


def test_rows_of_non_finite_gradients_match_own_sweeps():
    tape, seeds = branches()
    seeds = [(k, node, np.full(node.shape, np.inf) if k == 1 else g) for k, node, g in seeds]
    assert_rows_match_own_sweeps(tape, seeds)


def test_plan_counts_the_visits_of_one_sweep_per_seed_and_refuses_past_its_limit():
    tape = Tape()
    h = tape.param(np.ones(3))
    for _ in range(9):
        h = tape.apply("tanh", h)                  # 10 nodes: a seed at the top visits 10
    sources = [h, h.parents[0]]                    # 10 + 9 visits in all
    assert plan(tape.nodes, sources, every_index(tape), limit=18) is None
    walk = plan(tape.nodes, sources, every_index(tape), limit=19)
    assert walk.visits == 19 and calls(tape.nodes, walk.waves) == 9
    assert walk.held == 2 * 3 * 8 + 2 * 3 * 8     # both seeds' rows: at the leaf, at the widest op
    assert walk.waves == [[i] for i in range(9, -1, -1)]


def test_plan_puts_a_node_past_every_node_it_feeds():
    tape = Tape()
    x = tape.param(np.ones(3))
    a = tape.apply("tanh", x)
    b = tape.apply("exp", a)
    c = a * b                                      # a feeds c directly and through b
    walk = plan(tape.nodes, [c], every_index(tape))
    assert walk.waves == [[c.index], [b.index], [a.index], [x.index]]
    assert walk.shared == {a.index}                # b and c reach a


def test_plan_counts_a_node_shared_where_more_than_one_edge_or_seed_reaches_it():
    tape = Tape()
    x, w = tape.param(np.ones((2, 2))), tape.param(np.ones((2, 2)))
    tops = [tape.apply("tanh", x @ w), tape.apply("tanh", x * x), tape.apply("exp", w)]
    walk = plan(tape.nodes, [tops[0], tops[1], tops[1], tops[2], tops[2].parents[0]], every_index(tape))
    mm, square = tops[0].parents[0], tops[1].parents[0]
    # tops[1] is seeded twice, x * x reaches x twice, w is seeded and fed by exp(w) and x @ w
    assert walk.shared == {tops[1].index, x.index, w.index}
    assert not walk.shared & {tops[0].index, mm.index, square.index, tops[2].index}


def test_rows_through_a_concat_of_many_inputs_match_own_sweeps():
    """concat's rules are called row by row, sharing one node's offsets across its rows."""
    rng = np.random.default_rng(5)
    tape = Tape()
    parts = [tape.param(rng.normal(size=(1 + k % 3, 2))) for k in range(40)]
    joined = tape.apply("tanh", tape.apply("concat", *parts, axis=0))
    seeds = [(key, joined, rng.normal(size=joined.shape)) for key in range(3)]
    assert_rows_match_own_sweeps(tape, seeds)


@pytest.mark.parametrize("shape", [(), (0,), (2, 0), (3,)])
def test_rows_where_a_node_reads_one_input_twice_match_own_sweeps(shape):
    """x * x side by side, concat(x, x), a stack of one input, on 0-d, empty and plain shapes:
    what reaches x by both inputs of one node is summed in its own sweep's order."""
    rng = np.random.default_rng(6)
    tape, seeds = Tape(), []
    for copy in range(3):
        x = tape.param(rng.normal(size=shape))
        square = tape.apply("tanh", x * x)
        doubled = tape.apply("concat", x, x) if shape else tape.apply("stack", x)
        alone = tape.apply("stack", tape.apply("exp", x))
        for node in (square, square, doubled, alone):
            seeds.append((len(seeds), node, rng.normal(size=node.shape)))
    assert_rows_match_own_sweeps(tape, seeds)
