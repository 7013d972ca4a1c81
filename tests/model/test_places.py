"""Places inside expressions that YAML did not copy verbatim: folded, block, escaped, rejoined."""

from __future__ import annotations

import pytest

from gradflow.errors import ModelError
from gradflow.model.build import build
from gradflow.model.load import load_spec

HEAD = "gradflow: 1\nparams:\n  w: {shape: [3]}\ngraph:\n"
TAIL = "losses: [loss]\n"


def error_place(graph: str, head: str = HEAD) -> tuple[int, int, str]:
    with pytest.raises(ModelError) as info:
        build(load_spec("m.yaml", head + graph + TAIL))
    return info.value.line, info.value.col, info.value.message


@pytest.mark.parametrize("graph, line, col", [
    ("  loss: sum(w) + relux(w)\n", 5, 18),
    ("  loss: \"sum(w) + relux(w)\"\n", 5, 19),
    ("  loss: sum(w * 1.0) + 'é' * relux(w)\n", 5, 30),
    ("  loss: sum(w) +\n    relux(w)\n", 6, 5),
    ("  loss: sum(w) +\n\n    relux(w)\n", 7, 5),
    ("  loss: \"sum(w) +\n    relux(w)\"\n", 6, 5),
    ("  loss: \"sum(w) +\\t relux(w)\"\n", 5, 21),
    ("  loss: \"sum(w) + \\x72elux(w)\"\n", 5, 19),       # the name starts with an escape: at it
    ("  loss: \"sum(w) + \\u0072elux(w)\"\n", 5, 19),
    ("  loss: >\n    sum(w) +\n    relux(w)\n", 7, 5),
    ("  loss: >-  # a comment about the loss\n    sum(w)\n    + relux(w)\n", 7, 7),
    ("  loss: |\n    sum(w) + (\n        relux(w))\n", 7, 9),
])
def test_parse_expression_unknown_op_points_at_its_source(graph, line, col):
    assert error_place(graph)[:2] == (line, col)


@pytest.mark.parametrize("graph, line, col, message", [
    ("  loss: sum(w) +\n    (w @@ w)\n", 6, 9, "invalid expression: invalid syntax"),
    ("  loss: |\n    sum(w)\n      + relu(w)\n", 7, 7, "invalid expression: unexpected indent"),
    ("  loss: sum(w) *\n    " + "(" * 101 + "w" + ")" * 101 + "\n", 6, 105,
     "expression nested deeper than 100 levels"),
])
def test_parse_expression_refusals_point_into_folded_text(graph, line, col, message):
    assert error_place(graph) == (line, col, message)


def test_parse_init_rejoined_call_points_at_its_argument():
    head = "gradflow: 1\nparams:\n  w: {shape: [3], init: normal(0,nope())}\ngraph:\n"
    assert error_place("  loss: sum(w)\n", head) == (3, 34, "init arguments must be numbers or dim names")


def test_places_compare_and_hash_by_their_fields():
    from gradflow.model.spec import Place
    same, other = Place(3, 7), Place(3, 7, "train.py")
    assert Place(3, 7) == same and hash(Place(3, 7)) == hash(same)
    assert same != other and len({Place(3, 7), same, other}) == 2
