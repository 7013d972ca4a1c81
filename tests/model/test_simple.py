"""The short cut for simple expressions gives what Python's parser and the allowlist give."""

from __future__ import annotations

import ast
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradflow.errors import ModelError
from gradflow.model import expr
from gradflow.model.expr import parse_expression, parse_general, parse_general_init, parse_init
from gradflow.model.simple import parse_simple, parse_simple_init
from gradflow.model.spec import Place

NAMES = ["x", "h12", "actor.w", "a.b.c", "_", "True", "None", "lambda", "if", "a.if", "__x", "a.__b",
         "G.0.w", "é", "x1y", "match", "print"]
NUMBERS = ["0", "00", "7", "1.5", "1.", ".5", "1e3", "1_0", "0x1f", "123456789012345678901", "0.25"]
OPERATORS = ["+", "-", "*", "/", "**", "@", "//", "%", "<", "==", "*-", "and"]
MARKS = ["(", ")", ",", "=", "[", "]", ".", " ", "  ", "\t", ":", "'", "#"]
operand = st.sampled_from(NAMES + NUMBERS)
blank = st.sampled_from(["", " ", "  "])
call = st.builds(lambda f, a, b, c, d: f"{f}{b}({c}{a}{d})", st.sampled_from(NAMES), operand, blank, blank, blank)
binary = st.builds(lambda a, op, b, s, t: f"{a}{s}{op}{t}{b}", operand, st.sampled_from(OPERATORS), operand,
                   blank, blank)
pieces = st.lists(st.sampled_from(NAMES + NUMBERS + OPERATORS + MARKS), min_size=1, max_size=7).map("".join)
origin = st.builds(Place, st.integers(1, 500), st.integers(1, 80))


def outcome(parse, text: str, at: Place, quoted: bool):
    """What a parse gives, as comparable text: every node with its places, in walk order,
    or the error with its place."""
    try:
        tree = parse(text, "m.yaml", at, quoted)
    except ModelError as e:
        return "error", e.message, e.line, e.col
    return "tree", [ast.dump(node, include_attributes=True) for node in tree.gradflow_nodes]


@settings(max_examples=1500, deadline=None)
@given(st.one_of(call, binary, pieces), origin, st.booleans())
def test_simple_expressions_parse_as_the_general_path_parses_them(text, at, quoted):
    assert outcome(parse_expression, text, at, quoted) == outcome(parse_general, text, at, quoted)


@pytest.mark.parametrize("text", ["tanh(h)", "constant(0.9)", "h * w", "state @ actor.w", "a.b.c**2",
                                  "0+x", "sum(enc.layer1.b)"])
def test_simple_expressions_take_the_short_cut(text):
    assert parse_simple(text, Place(3, 9), False) is not None
    assert outcome(parse_expression, text, Place(3, 9), True) == outcome(parse_general, text, Place(3, 9), True)


@pytest.mark.parametrize("text", ["f(__x)", "None * x", "f(G.0.w)", "1if", "00 * x", "f(x) * y", "a + b + c",
                                  " x * y", "é * x", "lambda(x)", "1e3 * x", "x" * 300 + " * y"])
def test_other_expressions_take_the_general_path(text):
    assert parse_simple(text, Place(3, 9), False) is None


@pytest.mark.parametrize("text", ["a - -b", "a--b", "a**-1", "-a * b", "a < b < c", "a < b", "1e5 * a", "1_000 + a",
                                  "0x10 + a", "1. + a", "True + a", "None * b", "lambda(x)", "a.True * b",
                                  "f(-1)", "tanh(1e400)", "a * 1e400", "é * x", "x * é", "a\u00a0* b"])
@pytest.mark.parametrize("quoted", [False, True])
def test_corners_parse_as_the_general_path_parses_them(text, quoted):
    assert outcome(parse_expression, text, Place(3, 9), quoted) == outcome(parse_general, text, Place(3, 9), quoted)


INITS = ["zeros", "ones", "normal", "uniform", "randint", "constant", "glorot", "he", "gauss", "None", "__x",
         "normal.x", "True"]
init_arg = st.sampled_from(NAMES + NUMBERS + ["-1", "-0", "-0.0", "-2.5", "+1", "- 1", "--1", "-x", "True"])
init_call = st.builds(lambda f, args, sep, tail: f + "(" + sep.join(args) + ")" + tail, st.sampled_from(INITS),
                      st.lists(init_arg, max_size=3), st.sampled_from([", ", ",", " , ", ",  "]),
                      st.sampled_from(["", "", " ", "[0]", "()"]))


def general_init(text: str, path: str, at: Place, quoted: bool):
    """``parse_general_init`` with its expression read by Python's parser too, so that a
    mistake the two short cuts share cannot hide from the comparison."""
    with mock.patch.object(expr, "parse_simple", lambda *args: None):
        return parse_general_init(text, path, at, quoted)


def init_outcome(parse, text: str, at: Place, quoted: bool):
    try:
        init = parse(text, "m.yaml", at, quoted)
    except ModelError as e:
        return "error", e.message, e.line, e.col
    return "init", init.kind, [repr(a) for a in init.args], init.place   # repr: 0 from 0.0, -0.0 from 0.0


@settings(max_examples=1500, deadline=None)
@given(st.one_of(init_call, st.sampled_from(INITS), pieces), origin, st.booleans())
def test_simple_inits_read_as_the_general_path_reads_them(text, at, quoted):
    assert init_outcome(parse_init, text, at, quoted) == init_outcome(general_init, text, at, quoted)


@pytest.mark.parametrize("text", ["zeros", "normal(0.0, 0.02)", "randint(0, classes)", "uniform(-1, 1)"])
def test_simple_inits_take_the_short_cut(text):
    assert parse_simple_init(text) is not None
    assert init_outcome(parse_init, text, Place(3, 9), True) == init_outcome(general_init, text, Place(3, 9), True)


@pytest.mark.parametrize("text", ["normal(0, 1e400)", "constant(nan)", "constant(inf)", "constant(-nan)",
                                  "normal(0, 1_0)", "constant(0x10)", "constant(None)", "uniform(-1, -0.5)"])
def test_init_corners_read_as_the_general_path_reads_them(text):
    assert init_outcome(parse_init, text, Place(3, 9), False) == init_outcome(general_init, text, Place(3, 9), False)
