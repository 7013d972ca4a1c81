"""Tests for gradflow.model.source: YAML text -> located Nodes, and every refusal."""

from __future__ import annotations

import ast
import inspect
import math
import os
import re
import time

import pytest
import yaml

from gradflow.errors import ModelError
from gradflow.model import source, yamltext
from gradflow.model.source import MAX_CHARS, Node, parse_yaml

LOADERS = [
    pytest.param("SafeLoader", id="python"),
    pytest.param("CSafeLoader", id="libyaml", marks=pytest.mark.skipif(
        not yaml.__with_libyaml__, reason="PyYAML built without libyaml")),
]


@pytest.fixture(params=LOADERS, autouse=True)
def loader(request, monkeypatch):
    """Every test runs once with the pure-Python parser and once with libyaml."""
    monkeypatch.setattr(source, "LOADER", getattr(yaml, request.param))
    return request.param


def error_of(text: str | bytes) -> ModelError:
    with pytest.raises(ModelError) as info:
        parse_yaml(text, "m.yaml")
    return info.value


def place_of(text: str | bytes) -> tuple[int, int, str]:
    err = error_of(text)
    assert err.path == "m.yaml"
    return err.line, err.col, err.message


def quick_place_of(text: str | bytes, seconds: float = 1.0) -> tuple[int, int, str]:
    start = time.perf_counter()
    place = place_of(text)
    assert time.perf_counter() - start < seconds
    return place


# --- valid files -----------------------------------------------------------------

MODEL = """\
gradflow: 1
name: demo
dims:
  batch: 32
inputs:
  state: {shape: [batch, 8]}
flags: [on, 'on', ~, 2.5, -3]
"""


def test_parse_yaml_builds_located_tree():
    shape = Node([Node("batch", 6, 19), Node(8, 6, 26)], 6, 18, size=3)
    state = Node({"shape": shape}, 6, 10, keys={"shape": (6, 11)}, size=4)
    flags = [Node(True, 7, 9), Node("on", 7, 13, style="'"), Node(None, 7, 19),
             Node(2.5, 7, 22), Node(-3, 7, 27)]
    expected = Node(
        {
            "gradflow": Node(1, 1, 11),
            "name": Node("demo", 2, 7),
            "dims": Node({"batch": Node(32, 4, 10)}, 4, 3, keys={"batch": (4, 3)},
                         size=2),
            "inputs": Node({"state": state}, 6, 3, keys={"state": (6, 3)}, size=5),
            "flags": Node(flags, 7, 8, size=6),
        },
        1, 1,
        keys={"gradflow": (1, 1), "name": (2, 1), "dims": (3, 1), "inputs": (5, 1),
              "flags": (7, 1)},
        size=16,
    )
    assert parse_yaml(MODEL, "m.yaml") == expected


def test_parse_yaml_keeps_file_order_of_keys():
    root = parse_yaml("z: 1\na: 2\nm: 3\n", "m.yaml")
    assert list(root.value) == ["z", "a", "m"]
    assert list(root.keys) == ["z", "a", "m"]


def test_parse_yaml_keys_are_source_strings():
    root = parse_yaml("on: 1\nyes: 2\n1: 3\nnull: 4\n0x10: 5\nfalse: 6\n", "m.yaml")
    assert list(root.value) == ["on", "yes", "1", "null", "0x10", "false"]
    assert [node.value for node in root.value.values()] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("text", [
    "1", "-3", "+7", "0x1F", "017", "0b101", "1_000", "1:30", "2.5", "-1.5e+3", "1e", "e3", "1e3x",
    ".inf", "-.inf", "true", "No", "off", "ON", "~", "null", "", "hello", "'1'",
    '"true"', "'~'", "!!str 3", "!!int '3'", "!!float 1", "!!float '2.5'",
    "!!bool 'yes'", "!!null ''", "! 5", "!!str", "1.", "0o17",
])
def test_parse_yaml_resolves_scalars_like_safe_loader(text):
    node = parse_yaml(f"v: {text}\n", "m.yaml").value["v"]
    expected = yaml.safe_load(f"v: {text}\n")["v"]
    assert node.value == expected
    assert type(node.value) is type(expected)


@pytest.mark.parametrize("text, value", [("1e-3", 1e-3), ("1E5", 1e5), ("2.5e3", 2500.0), ("-1e+2", -100.0),
                                         (".5e1", 5.0), ("1_0e2", 1000.0), ("+3.e0", 3.0)])
def test_parse_yaml_reads_exponents_without_a_dot_or_a_sign_as_floats(text, value):
    # YAML 1.1 (SafeLoader) reads 1e-3 as a string; YAML 1.2, JSON and Python as a number,
    # and so does a user who writes `vanishing: 1e-3`.
    assert yaml.safe_load(f"v: {text}\n")["v"] == text
    node = parse_yaml(f"v: {text}\n", "m.yaml").value["v"]
    assert type(node.value) is float and node.value == value
    assert parse_yaml(f"v: '{text}'\n", "m.yaml").value["v"].value == text   # quoted: text


def test_parse_yaml_resolves_nan():
    assert math.isnan(parse_yaml("v: .nan\n", "m.yaml").value["v"].value)


def test_parse_yaml_keeps_timestamps_and_other_tags_as_text():
    text = "d: 2001-12-14\nt: 2001-12-14 21:59:43.10 -5\ne: =\nm: <<\n"
    root = parse_yaml(text, "m.yaml")
    assert [node.value for node in root.value.values()] == [
        "2001-12-14", "2001-12-14 21:59:43.10 -5", "=", "<<"]


def test_parse_yaml_records_scalar_style():
    root = parse_yaml("a: x\nb: 'x'\nc: \"x\"\nd: |\n  x\ne: >\n  x\n", "m.yaml")
    styles = {key: (node.value, node.style) for key, node in root.value.items()}
    assert styles == {"a": ("x", None), "b": ("x", "'"), "c": ("x", '"'),
                      "d": ("x\n", "|"), "e": ("x\n", ">")}


def test_parse_yaml_allows_standard_collection_tags():
    root = parse_yaml("a: !!map {x: 1}\nb: !!seq [1]\n", "m.yaml")
    assert root.value["a"].value["x"].value == 1
    assert root.value["b"].value[0].value == 1


def test_parse_yaml_accepts_bytes_and_byte_order_mark():
    for text in (b"a: 1\n", b"\xef\xbb\xbfa: 1\n", "\ufeffa: 1\n"):
        root = parse_yaml(text, "m.yaml")
        assert root.value == {"a": Node(1, 1, 4)}
        assert root.keys == {"a": (1, 1)}


def test_parse_yaml_decodes_utf8():
    root = parse_yaml("k: café\n".encode(), "m.yaml")
    assert root.value["k"].value == "café"


def test_parse_yaml_alias_reuses_node_and_counts_expanded_size():
    root = parse_yaml("a: &x [1, 2]\nb: *x\nc: *x\n", "m.yaml")
    assert root.value["b"] is root.value["a"]
    assert root.value["c"] is root.value["a"]
    assert root.value["a"].size == 3
    assert root.size == 10


def test_parse_yaml_allows_64_levels():
    root = parse_yaml("x: " + "[" * 63 + "]" * 63, "m.yaml")
    depth, node = 1, root.value["x"]
    while node.value:
        depth, node = depth + 1, node.value[0]
    assert depth + 1 == 64


def test_parse_yaml_allows_aliases_up_to_64_levels():
    text = "a: &a " + "[" * 60 + "]" * 60 + "\nb: " + "[" * 3 + "*a" + "]" * 3 + "\n"
    assert parse_yaml(text, "m.yaml").value["b"].size == 63


# --- refusals ----------------------------------------------------------------------

EMPTY = "empty model file: expected a mapping with 'gradflow: 1'"


@pytest.mark.parametrize(
    "text", ["", "# only\n# comments\n", "\n\n", "---\n", "--- ~\n", b""])
def test_parse_yaml_refuses_empty_file(text):
    assert place_of(text) == (1, 1, EMPTY)


@pytest.mark.parametrize("text, line, col", [
    ("a: 1\n---\nb: 2\n", 2, 1),
    ("a: 1\n...\n--- {b: 2}\n", 3, 1),
    ("---\na: 1\n--- \n", 3, 1),
])
def test_parse_yaml_refuses_second_document(text, line, col):
    assert place_of(text) == (
        line, col, "more than one YAML document (a model file holds exactly one)")


@pytest.mark.parametrize("text, line, col, kind", [
    ("- 1\n", 1, 1, "a sequence"),
    ("\n\n  - a\n", 3, 3, "a sequence"),
    ("  hello\n", 1, 3, "a string"),
    ("3\n", 1, 1, "an integer"),
])
def test_parse_yaml_refuses_non_mapping_root(text, line, col, kind):
    assert place_of(text) == (
        line, col, f"the top level must be a mapping with 'gradflow: 1', not {kind}")


@pytest.mark.parametrize("text, line, col, problem", [
    ("a: b: c\n", 1, 5, "invalid YAML: mapping values are not allowed"),
    ("a: 1\n\tb: 2\n", 2, 1, "invalid YAML: found "),
    ("a: 'open\n", 2, 1, "invalid YAML: found unexpected end of stream"),
    ("a: 1\n- b\n", 2, 1, "invalid YAML: "),
])
def test_parse_yaml_reports_syntax_errors_at_problem(text, line, col, problem):
    got_line, got_col, message = place_of(text)
    assert (got_line, got_col) == (line, col)
    assert message.startswith(problem)


def test_parse_yaml_reports_unmarked_yaml_errors_at_start(monkeypatch):
    class BrokenLoader:
        def __init__(self, stream):
            pass

        def get_event(self):
            raise yaml.YAMLError("reader\n  broke")

        check_event = get_event

        def dispose(self):
            pass

    monkeypatch.setattr(source, "LOADER", BrokenLoader)
    assert place_of("a: 1\n") == (1, 1, "invalid YAML: reader broke")


@pytest.mark.parametrize("text, line, col, kind", [
    ("{[1]: 2}\n", 1, 2, "sequence"),
    ("? - a\n: b\n", 1, 3, "sequence"),
    ("a:\n  ? {x: 1}\n  : b\n", 2, 5, "mapping"),
])
def test_parse_yaml_refuses_collection_keys(text, line, col, kind):
    assert place_of(text) == (line, col, f"a mapping key must be a scalar, not a {kind}")


def test_parse_yaml_refuses_alias_keys():
    assert place_of("a: &k x\n*k : 1\n") == (2, 1, "an alias cannot be a mapping key")


@pytest.mark.parametrize("text, line, col, key, first", [
    ("a: 1\nb:\n  c: 1\n  c: 2\na: 3\n", 4, 3, "c", 3),
    ("a: 1\n\n'a': 2\n", 3, 1, "a", 1),
    ("on: 1\n'on': 2\n", 2, 1, "on", 1),
    ("1: 1\nx: {'1': 2, 1: 3}\n", 2, 13, "1", 2),
])
def test_parse_yaml_refuses_duplicate_keys(text, line, col, key, first):
    assert place_of(text) == (
        line, col, f"duplicate key '{key}' (first defined at line {first})")


def test_parse_yaml_allows_same_key_in_different_mappings():
    root = parse_yaml("a: {x: 1}\nb: {x: 2}\n", "m.yaml")
    assert root.value["b"].value["x"].value == 2


def test_parse_yaml_refuses_merge_keys():
    assert place_of("base: &b {x: 1}\nderived:\n  <<: *b\n") == (
        3, 3, "merge keys are not supported")


def test_parse_yaml_allows_quoted_merge_key_text():
    assert list(parse_yaml("'<<': 1\n", "m.yaml").value) == ["<<"]


@pytest.mark.parametrize("text, line, col, tag", [
    ("a: !!python/object/apply:os.system ['echo hi']\n", 1, 4,
     "!!python/object/apply:os.system"),
    ("a: !!python/name:os.system\n", 1, 4, "!!python/name:os.system"),
    ("!!python/object:os.Foo {a: 1}\n", 1, 1, "!!python/object:os.Foo"),
    ("? !!python/name:os.system x\n: 1\n", 1, 3, "!!python/name:os.system"),
    ("a:\n  - !foo x\n", 2, 5, "!foo"),
    ("a: !!binary aGk=\n", 1, 4, "!!binary"),
    ("a: !!set {x}\n", 1, 4, "!!set"),
    ("a: !!timestamp 2001-01-01\n", 1, 4, "!!timestamp"),
    ("a: <<\nb: !!merge <<\n", 2, 4, "!!merge"),
])
def test_parse_yaml_refuses_unknown_tags(monkeypatch, text, line, col, tag):
    calls = []
    monkeypatch.setattr(os, "system", calls.append)
    assert place_of(text) == (line, col, f"tag '{tag}' is not allowed")
    assert calls == []


@pytest.mark.parametrize("text, message", [
    ("a: !!int x\n", "'x' is not a valid !!int"),
    ("a: !!int ''\n", "'' is not a valid !!int"),
    ("a: !!float abc\n", "'abc' is not a valid !!float"),
    ("a: !!bool maybe\n", "'maybe' is not a valid !!bool"),
    ("a: !!null x\n", "'x' is not a valid !!null"),
    ("a: !!seq x\n", "tag '!!seq' cannot be used on a scalar"),
    ("a: !!map [1]\n", "tag '!!map' cannot be used on a sequence"),
    ("a: !!str {x: 1}\n", "tag '!!str' cannot be used on a mapping"),
    ("a: " + "1" * 5000 + "\n", "number too long (5000 characters)"),
    ("a: 1" + ":30" * 3000 + "\n", "number too long (9001 characters)"),
], ids=lambda value: value[:30])
def test_parse_yaml_refuses_unconvertible_tagged_values(text, message):
    assert quick_place_of(text) == (1, 4, message)


def test_parse_yaml_refuses_undefined_alias():
    assert place_of("a: 1\nb: [1, *nope]\n") == (2, 8, "alias '*nope' is not defined")


def test_parse_yaml_refuses_recursive_alias():
    assert place_of("a: &x [1, *x]\n") == (
        1, 11, "alias '*x' refers to a node that contains it")


def test_parse_yaml_refuses_duplicate_anchor():
    assert place_of("a: &x 1\nb: &x [2]\n") == (
        2, 4, "duplicate anchor '&x' (first defined at line 1)")


def test_parse_yaml_refuses_billion_laughs_quickly():
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    # Sizes 11, 111, 1111, 11111: e's eighth alias takes the root past 100,000.
    assert quick_place_of("\n".join(lines) + "\n") == (
        5, 36, "document too large after expanding aliases (billion laughs?)")


def test_parse_yaml_refuses_too_many_nodes(loader, monkeypatch):
    # 100,000 real nodes take real parsing; the pure-Python parser needs tens of
    # microseconds per node, so it checks the same rule at a smaller limit.
    # Generous bounds: the point is "no blow-up", and CI machines are noisy.
    limit, seconds = (100_000, 6.0) if loader == "CSafeLoader" else (1_000, 3.0)
    monkeypatch.setattr(source, "MAX_NODES", limit)
    text = "a: [" + "0," * limit + "]\n"
    # The root, the list and element number limit - 1 make limit + 1 nodes.
    assert quick_place_of(text, seconds) == (
        1, 5 + 2 * (limit - 2), f"document too large (more than {limit} nodes)")


@pytest.mark.parametrize("text, line, col", [
    ("x: " + "[" * 64 + "]" * 64, 1, 67),
    ("x: " + "[" * 20_000 + "]" * 20_000, 1, 67),
    ("[" * 20_000 + "]" * 20_000, 1, 65),
    ("x: " + "{a: " * 20_000 + "1" + "}" * 20_000, 1, 256),
    ("x:\n " + "- " * 20_000 + "1\n", 2, 128),
    ("".join(" " * i + "a:\n" for i in range(100)), 65, 65),
], ids=["flow-65", "flow-seq-20000", "root-seq-20000", "flow-map-20000",
        "block-seq-20000", "block-map-100"])
def test_parse_yaml_refuses_deep_nesting_quickly(text, line, col, loader, monkeypatch):
    # "Quickly" as a count, not a time: the refusal comes at the 65th opening, so at most
    # two events per level (a key and its opening) are read however deep the text goes.
    pulled = []
    parser = getattr(yaml, loader)

    class Counting(parser):
        def get_event(self):
            pulled.append(1)
            return super().get_event()
    monkeypatch.setattr(source, "LOADER", Counting)
    assert place_of(text) == (line, col, "nesting deeper than 64 levels")
    assert len(pulled) <= 2 * 64 + 4


def test_parse_yaml_refuses_deep_nesting_through_alias():
    text = "a: &a " + "[" * 60 + "]" * 60 + "\nb: " + "[" * 4 + "*a" + "]" * 4 + "\n"
    assert place_of(text) == (
        2, 8, "nesting deeper than 64 levels after expanding alias '*a'")


@pytest.mark.parametrize("text", [
    "a: " + "x" * MAX_CHARS,
    b"a: " + b"x" * MAX_CHARS,
    "a: 1\n" + "#" * MAX_CHARS,
], ids=["str", "bytes", "comment"])
def test_parse_yaml_refuses_text_over_16_mib_quickly(text):
    assert quick_place_of(text) == (1, 1, "model file is larger than 16 MiB")


@pytest.mark.parametrize("data, line, col, byte", [
    (b"a: 1\nb: caf\xc3\xa9 \xff\n", 2, 9, "0xff"),
    (b"\xff\xfea\x00:\x00", 1, 1, "0xff"),
    (b"\xef\xbb\xbfa: \xc3\n", 1, 4, "0xc3"),
])
def test_parse_yaml_refuses_invalid_utf8(data, line, col, byte):
    assert place_of(data) == (line, col, f"file is not valid UTF-8 (byte {byte})")


@pytest.mark.parametrize("text, line, col, code", [
    ("a: b\x07\n", 1, 5, "0007"),
    ("a: 1\nb: \x00\n", 2, 4, "0000"),
    ("a: \ud800\n", 1, 4, "D800"),
])
def test_parse_yaml_refuses_control_characters(text, line, col, code):
    assert place_of(text) == (line, col, f"character U+{code} is not allowed in YAML")


def test_parse_yaml_error_prints_as_path_line_col():
    assert str(error_of("a: 1\na: 2\n")) == (
        "m.yaml:2:1: error: duplicate key 'a' (first defined at line 1)")


# --- structure ---------------------------------------------------------------------

def test_source_module_never_recurses_nor_composes():
    tree = ast.parse(inspect.getsource(source))
    called = set()
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef):
            names = {n.id if isinstance(n, ast.Name) else n.attr
                     for n in ast.walk(func) if isinstance(n, (ast.Name, ast.Attribute))}
            if func.name in names:
                called.add(func.name)
    attributes = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert called == set()
    assert attributes.isdisjoint({"compose", "compose_all", "load", "load_all",
                                  "safe_load", "full_load", "unsafe_load"})


@pytest.mark.parametrize("text,expected", [
    ("a: {init: randint(0, actions)}\n", {"init": "randint(0, actions)"}),
    ("a: {init: normal(0.0, 1.0), b: uniform(-1, 1)}\n", {"init": "normal(0.0, 1.0)", "b": "uniform(-1, 1)"}),
])
def test_rejoin_calls_split_at_commas_in_flow_mappings(text, expected):
    root = parse_yaml(text, "m.yaml")
    assert {k: v.value for k, v in root.value["a"].value.items()} == expected


def test_rejoin_calls_in_flow_sequences_and_not_elsewhere():
    root = parse_yaml("a: [f(x, y), z]\nb: [x, y]\nc: 'f(x'\n", "m.yaml")
    assert [n.value for n in root.value["a"].value] == ["f(x, y)", "z"]
    assert [n.value for n in root.value["b"].value] == ["x", "y"]
    assert root.value["c"].value == "f(x"


@pytest.mark.parametrize("text", ["a: [f(x, y, z, w]\n", "a: {i: f(x, y, z, w}\n"])
def test_rejoin_calls_counts_brackets_in_each_piece_once(monkeypatch, text):
    # Brackets are counted piece by piece, not in the joined text again per piece: a flow
    # sequence of a million plain items after an open bracket would otherwise be quadratic.
    counted, unclosed = [], source._unclosed
    monkeypatch.setattr(source, "_unclosed", lambda text: counted.append(text) or unclosed(text))
    root = parse_yaml(text, "m.yaml")
    items = root.value["a"].value
    assert (items[0] if isinstance(items, list) else items["i"]).value == "f(x, y, z, w"
    assert sorted(set(counted)) == ["f(x", "w", "y", "z"] and len(counted) <= 5


def test_rejoin_calls_leaves_a_real_key_alone():
    root = parse_yaml("a: {x: f(1, b: 2)}\n", "m.yaml")
    assert list(root.value["a"].value) == ["x", "b"]


def test_only_the_first_text_check_can_match_ascii():
    """What lets ASCII text skip the others, and take the first for its ASCII part alone."""
    ascii_chars = [chr(c) for c in range(128)]
    refused = [c for c in ascii_chars if re.search(yamltext._TEXT_CHECKS[0][0], c)]
    assert refused == [c for c in ascii_chars if re.search(yamltext._ASCII_CHECKS[0][0], c)]
    assert "\x00" in refused and "\x7f" in refused and "\t" not in refused and "\n" not in refused
    assert yamltext._ASCII_CHECKS[0][1] == yamltext._TEXT_CHECKS[0][1]
    assert not any(re.search(pattern, "".join(ascii_chars)) for pattern, _ in yamltext._TEXT_CHECKS[1:])


class ScansAheadToALimit(yaml.SafeLoader):
    """libyaml from PyYAML 6.0.4: a nesting limit (here 100 levels, or a made-up 'STOP') met
    while scanning ahead, before the parser has handed out the events of the 65th level."""

    def get_event(self):
        deep, stop = self.buffer.find("[" * 100), self.buffer.find("STOP")
        at = deep + 100 if deep >= 0 else stop
        if at >= 0:
            mark = yaml.Mark("m.yaml", at, 0, at, None, None)
            raise yaml.scanner.ScannerError("while scanning", mark, "exceeded maximum nesting depth", mark)
        return super().get_event()


def test_a_parser_that_refuses_deep_nesting_itself_is_still_refused_at_our_level(monkeypatch):
    monkeypatch.setattr(source, "LOADER", ScansAheadToALimit)
    assert place_of("x: " + "[" * 20_000 + "]" * 20_000) == (1, 67, "nesting deeper than 64 levels")
    # Not deeper than ours in the text up to its mark: the parser's own words stand.
    assert place_of("x: [[1]] STOP") == (1, 10, "invalid YAML: exceeded maximum nesting depth")
