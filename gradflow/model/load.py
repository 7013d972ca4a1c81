"""Model file -> validated ModelSpec. Every rejection names FILE:LINE:COL.

The YAML is read by ``source.parse_yaml`` (line/column marks, duplicate keys
refused, no tags, bounded aliases); this module checks the format's sections and
parses each graph expression with the allowlist of ``expr.py``.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from gradflow.engine import ALIASES, OPS, gc_paused
from gradflow.errors import ModelError, did_you_mean
from gradflow.model.dims import parse_dim
from gradflow.model.evaluate import is_number
from gradflow.model.expr import parse_expression, parse_init
from gradflow.model.files import read_regular
from gradflow.model.source import MAX_CHARS, Node, parse_yaml
from gradflow.model.spec import (STATUSES, Entry, Init, InstanceSpec, LossSpec, ModelSpec, ModuleSpec,
                                 Place, TensorSpec)

FORMAT_VERSION = 1
TOP_KEYS = ("gradflow", "name", "description", "seed", "source", "dims", "inputs", "params", "modules",
            "instances", "graph", "losses", "expect", "check")
TENSOR_KEYS = {"input": ("shape", "dtype", "init", "value", "source"),
               "param": ("shape", "dtype", "init", "value", "frozen", "source")}
ENTRY_KEYS = ("expr", "source")
SOURCE = r"(?s)(?P<file>.+):(?P<line>[0-9]+):(?P<col>[0-9]+)\Z"   # compiled on first use
MODULE_KEYS = ("inputs", "dims", "params", "graph", "output", "outputs", "description")
CHECK_KEYS = ("select", "ignore", "strict", "vanishing", "exploding", "max-memory")
RESERVED = set(OPS) | set(ALIASES) | {"repeat", "split", "chunk", "True", "False", "None"}


class Loader:
    """Checks one file's sections; raises ModelError at the first problem."""

    def __init__(self, path: str):
        self.path = path
        self.defined: dict[str, Place] = {}   # every global name -> where it was defined
        self.source: Place | None = None      # the top-level `source:`, once read

    def fail(self, message: str, at) -> ModelError:
        line, col = (at.line, at.col) if hasattr(at, "line") else at
        return ModelError(message, self.path, line, col)

    # -- generic shapes of YAML ------------------------------------------------
    def mapping(self, node: Node, what: str, allowed=None) -> dict:
        if not isinstance(node.value, dict):
            raise self.fail(f"{what} must be a mapping, not {kind_of(node.value)}", node)
        for key in node.value if allowed is not None else ():
            if key not in allowed:
                raise self.fail(f"unknown key {key!r} in {what}{did_you_mean(key, allowed)}",
                                node.keys[key])
        return node.value

    def sequence(self, node: Node, what: str) -> list:
        if isinstance(node.value, str):   # a single name stands for a list of one
            return [node]
        if not isinstance(node.value, list):
            raise self.fail(f"{what} must be a list, not {kind_of(node.value)}", node)
        return node.value

    def integer(self, node: Node, what: str, low=None, high=None) -> int:
        v = node.value
        if not isinstance(v, int) or isinstance(v, bool):
            raise self.fail(f"{what} must be an integer, not {kind_of(v)}", node)
        if low is not None and v < low:
            raise self.fail(f"{what} must be at least {low}, got {v}", node)
        if high is not None and v > high:
            raise self.fail(f"{what} must be at most {high}, got {v}", node)
        return v

    def string(self, node: Node, what: str) -> str:
        if not isinstance(node.value, str):
            raise self.fail(f"{what} must be a string, not {kind_of(node.value)}", node)
        return node.value

    def name(self, name: str, at, what: str, scope: dict | None = None) -> str:
        if not is_name(name) or "__" in name:
            raise self.fail(f"{what} {name!r} is not a valid name (dotted identifiers such as enc.w or "
                            "G.0.weight)", at)
        if name in RESERVED:
            raise self.fail(f"{what} {name!r} has the name of an op; choose another name", at)
        scope = self.defined if scope is None else scope
        if name in scope:
            first = scope[name]
            raise self.fail(f"{name!r} is defined twice (first at line {first.line})", at)
        scope[name] = place_of(at)
        return name

    # -- sections ----------------------------------------------------------------
    def model(self, root: Node) -> ModelSpec:
        if isinstance(root.value, dict) and root.value and not set(root.value) & set(TOP_KEYS):
            keys = list(root.value)
            raise self.fail(f"not a gradflow model: no 'gradflow: 1' at the top, and no key of a model "
                            f"(it has {', '.join(map(repr, keys[:4]))}{', ...' if len(keys) > 4 else ''})", root)
        top = self.mapping(root, "the model file", TOP_KEYS)
        if "gradflow" not in top:
            raise self.fail("missing 'gradflow: 1' (the format version) at the top of the model", root)
        version = top["gradflow"]
        if not isinstance(version.value, int) or isinstance(version.value, bool):
            raise self.fail(f"the format version must be an integer ('gradflow: {FORMAT_VERSION}'), "
                            f"not {kind_of(version.value)}", version)
        if version.value != FORMAT_VERSION:
            raise self.fail(f"unsupported format version {version.value!r}: this gradflow reads "
                            f"'gradflow: {FORMAT_VERSION}'", version)
        get = top.get
        name = self.string(get("name"), "name") if "name" in top else Path(self.path).stem
        description = self.string(get("description"), "description") if "description" in top else ""
        seed = self.integer(get("seed"), "seed", low=0, high=2 ** 63 - 1) if "seed" in top else 0   # as --seed
        self.source = self.source_place(top["source"]) if "source" in top else None
        dims = self.dims(get("dims"), "dims")
        inputs = self.tensors(get("inputs"), "input")
        params = self.tensors(get("params"), "param")
        modules = self.modules(get("modules"))
        instances = self.instances(get("instances"), modules)
        if "graph" not in top:
            raise self.fail("missing 'graph:' (the computation, one line per node)", root)
        graph = self.graph(top["graph"], "graph", self.defined)
        losses = self.losses(get("losses"), root)
        expect, expect_places = self.expect(get("expect"), losses)
        spec = ModelSpec(self.path, name, description, seed, dims, inputs, params, modules,
                         instances, graph, losses, expect, expect_places=expect_places)
        spec.dims_place = place_of(root.keys["dims"]) if "dims" in top else None
        spec.source = self.source
        if "check" in top:
            spec.check, spec.check_places = self.check(top["check"])
        return spec

    def dims(self, node: Node | None, what: str) -> dict:
        """{name: (int or DimExpr, Place)}: a size, or an integer expression of other dims."""
        if node is None or node.value is None:
            return {}
        out = {}
        for key, value in self.mapping(node, what).items():
            name = self.dim_name(key, node.keys[key], what)
            if isinstance(value.value, str):
                out[name] = (parse_dim(value.value, self.path, place_of(value)), place_of(value))
            else:
                out[name] = (self.integer(value, f"dim {key!r}", low=1), place_of(value))
        return out

    def dim_name(self, name, at, what):
        if not (name.isascii() and name.isidentifier()):   # letters, digits and _
            raise self.fail(f"{what}: {name!r} is not a valid dim name (letters, digits and _)", at)
        if name in RESERVED:
            raise self.fail(f"{what}: {name!r} is the name of an op; choose another name", at)
        return name

    def tensors(self, node: Node | None, kind: str, scope: dict | None = None) -> dict:
        if node is None or node.value is None:
            return {}
        section = "inputs" if kind == "input" else "params"
        return {self.name(k, node.keys[k], kind, scope): self.tensor(k, v, kind, node.keys[k])
                for k, v in self.mapping(node, section).items()}

    def tensor(self, name: str, node: Node, kind: str, at) -> TensorSpec:
        fields = self.mapping(node, f"{kind} {name!r}", TENSOR_KEYS[kind])
        if "shape" not in fields and "value" not in fields:
            raise self.fail(f"{kind} {name!r} needs a shape, e.g. {{shape: [batch, 8]}}", node)
        shape, shape_place = (), None
        if "shape" in fields:
            shape, shape_place = self.shape(fields["shape"], name), place_of(fields["shape"])
        dtype = "float"
        if "dtype" in fields:
            dtype = self.string(fields["dtype"], "dtype")
            if dtype not in ("float", "int"):
                raise self.fail(f"dtype must be 'float' or 'int', not {dtype!r}", fields["dtype"])
            if kind == "param" and dtype == "int":
                raise self.fail(f"param {name!r} cannot be an integer tensor: parameters are trained "
                                "by gradient; put integer data (labels, indices) under inputs",
                                fields["dtype"])
        init = None
        if "value" in fields:
            init = self.value_init(fields["value"], name)
            if "shape" not in fields:
                shape = nested_shape(init.value)
        if "init" in fields:
            if "value" in fields:
                raise self.fail(f"{kind} {name!r}: give either init or value, not both", fields["init"])
            init = parse_init(self.string(fields["init"], "init"), self.path, place_of(fields["init"]),
                              quoted=fields["init"].style is not None, raw=fields["init"].raw)
        frozen = False
        if "frozen" in fields:
            frozen = fields["frozen"].value
            if not isinstance(frozen, bool):
                raise self.fail(f"frozen must be true or false, not {kind_of(frozen)}", fields["frozen"])
        source = self.source_place(fields["source"]) if "source" in fields else None
        return TensorSpec(name, shape, dtype, init, place_of(at), shape_place, frozen, source)

    def source_place(self, node: Node) -> Place:
        """``PATH:LINE:COL`` of the code that made something (an imported model's Python line).
        PATH is relative to the model file's folder unless absolute; it is kept as the
        current directory sees it, relative where it is inside it."""
        match = re.match(SOURCE, node.value) if isinstance(node.value, str) else None
        if match is None or int(match["line"]) < 1 or int(match["col"]) < 1:
            raise self.fail(f"source must be PATH:LINE:COL (a 1-based line and column), "
                            f"not {kind_of(node.value)}", node)
        return Place(int(match["line"]), int(match["col"]), shown_path(match["file"], self.path))

    def shape(self, node: Node, name: str) -> tuple:
        items = self.sequence(node, f"shape of {name!r}") if not isinstance(node.value, str) else None
        if items is None:
            raise self.fail(f"shape of {name!r} must be a list like [batch, 8]", node)
        out = []
        for item in items:
            v = item.value
            if isinstance(v, str) and is_name(v):
                out.append(v)
            elif isinstance(v, int) and not isinstance(v, bool) and v >= 1:
                out.append(v)
            else:
                raise self.fail(f"shape of {name!r}: {v!r} is not a positive size or a dim name", item)
        return tuple(out)

    def value_init(self, node: Node, name: str) -> Init:
        value = plain(node)
        try:
            shape = nested_shape(value)
        except ValueError as e:
            at = first_leaf(node, lambda v: not is_number(v)) if isinstance(e, NotNumbers) else None
            raise self.fail(f"value of {name!r}: {e}", at or node) from None
        if 0 in shape:
            raise self.fail(f"value of {name!r} is empty: a tensor needs at least one value", node)
        infinite = first_leaf(node, lambda v: isinstance(v, float) and not math.isfinite(v))
        if infinite is not None:
            raise self.fail(f"value of {name!r}: values must be finite, not {infinite.value}", infinite)
        return Init("value", value=value, place=place_of(node))

    def modules(self, node: Node | None) -> dict:
        if node is None or node.value is None:
            return {}
        return {self.name(k, node.keys[k], "module"): self.module(k, v)
                for k, v in self.mapping(node, "modules").items()}

    def module(self, name: str, node: Node) -> ModuleSpec:
        fields = self.mapping(node, f"module {name!r}", MODULE_KEYS)
        scope: dict[str, Place] = {}
        inputs = tuple(self.name(self.string(n, "module input"), n, "module input", scope)
                       for n in self.sequence(fields["inputs"], "inputs")) if "inputs" in fields else ()
        dims = self.dims(fields.get("dims"), f"dims of module {name!r}")
        params = self.tensors(fields.get("params"), "param", scope)
        if "graph" not in fields:
            raise self.fail(f"module {name!r} has no graph", node)
        graph = self.graph(fields["graph"], f"graph of module {name!r}", scope)
        if ("output" in fields) == ("outputs" in fields):
            raise self.fail(f"module {name!r} needs 'output: NAME' or 'outputs: [A, B]'", node)
        multi = "outputs" in fields
        out_node = fields["outputs" if multi else "output"]
        outputs = tuple(self.string(n, "output") for n in self.sequence(out_node, "outputs"))
        for out, at in zip(outputs, self.sequence(out_node, "outputs")):
            if out not in scope:
                raise self.fail(f"module {name!r} has no {out!r} to output{did_you_mean(out, scope)}", at)
        return ModuleSpec(name, inputs, dims, params, graph, outputs, multi, place_of(node))

    def instances(self, node: Node | None, modules: dict) -> dict:
        if node is None or node.value is None:
            return {}
        out = {}
        for key, value in self.mapping(node, "instances").items():
            self.name(key, node.keys[key], "instance")
            if isinstance(value.value, str):
                module, dims, at = value.value, {}, value
            else:
                fields = self.mapping(value, f"instance {key!r}", ("module", "dims"))
                if "module" not in fields:
                    raise self.fail(f"instance {key!r} needs 'module: NAME'", value)
                at = fields["module"]
                module = self.string(at, "module")
                dims = self.dims(fields.get("dims"), f"dims of instance {key!r}")
            if module not in modules:
                raise self.fail(f"unknown module {module!r}{did_you_mean(module, modules)}", at)
            for dim in dims:
                if dim not in modules[module].dims:
                    declared = modules[module].dims
                    hint = did_you_mean(dim, declared) or (
                        f" (it declares {', '.join(declared)})" if declared else " (it declares no dims)")
                    raise self.fail(f"instance {key!r}: module {module!r} has no dim {dim!r}{hint}",
                                    fields["dims"].keys[dim])
            out[key] = InstanceSpec(key, module, dims, place_of(value))
        return out

    def graph(self, node: Node, what: str, scope: dict) -> list[Entry]:
        entries = []
        for key, value in self.mapping(node, what).items():
            at = Place(*node.keys[key])
            targets = tuple(t.strip() for t in key.split(",")) if "," in key else (key.strip(),)
            for target in targets:
                self.name(target, at, "graph entry", scope)
            entries.append(self.entry(key, targets, value, at))
        return entries

    def entry(self, key: str, targets: tuple, node: Node, at: Place) -> Entry:
        source = None
        if isinstance(node.value, dict):   # {expr: ..., source: PATH:LINE:COL}
            fields = self.mapping(node, f"graph entry {key!r}", ENTRY_KEYS)
            if "expr" not in fields:
                raise self.fail(f"graph entry {key!r} needs 'expr:', the expression", node)
            source = self.source_place(fields["source"]) if "source" in fields else None
            node = fields["expr"]
        v, origin = node.value, Place(node.line, node.col)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return Entry(key, targets, None, float(v), at, origin, source)
        if not isinstance(v, str) or not v.strip():
            raise self.fail(f"graph entry {key!r} must be an expression, not {kind_of(v)}", node)
        quoted = node.style in ("'", '"')
        tree = parse_expression(v, self.path, origin, quoted, node.raw)
        return Entry(key, targets, tree, None, at, origin, source)

    def losses(self, node: Node | None, root: Node) -> dict:
        if node is None or not node.value:
            raise self.fail("no losses: add 'losses: [NAME]' naming the scalar(s) backward starts from",
                            node or root)
        if isinstance(node.value, list):
            out = {}
            for n in node.value:
                name = self.string(n, "loss")
                if name in out:    # a mapping's repeated key is refused as YAML; the list's too
                    raise self.fail(f"losses: {name!r} is listed twice", n)
                out[name] = LossSpec(n.value, None, place_of(n), self.source)
            return out
        out = {}
        for key, value in self.mapping(node, "losses").items():
            wrt, source = None, self.source
            if isinstance(value.value, dict):
                fields = self.mapping(value, f"loss {key!r}", ("wrt", "source"))
                if "wrt" in fields:
                    wrt = self.globs(fields["wrt"], "wrt")
                if "source" in fields:
                    source = self.source_place(fields["source"])
            elif value.value is not None:
                wrt = self.globs(value, "wrt")
            out[key] = LossSpec(key, wrt, place_of(node.keys[key]), source)
        return out

    def globs(self, node: Node, what: str) -> list:
        """[(glob, place)]: findings about a glob point at it, or at the top-level source."""
        return [(self.string(n, what), self.source or place_of(n)) for n in self.sequence(node, what)]

    def expect(self, node: Node | None, losses: dict):
        if node is None or node.value is None:
            return {}, {}
        expect, places = {}, {}
        for loss, value in self.mapping(node, "expect").items():
            if loss not in losses:
                raise self.fail(f"expect: {loss!r} is not a declared loss{did_you_mean(loss, losses)}",
                                node.keys[loss])
            fields = self.mapping(value, f"expect for {loss!r}", STATUSES)
            expect[loss] = {status: self.globs(globs, status) for status, globs in fields.items()}
            places[loss] = self.source or place_of(node.keys[loss])
        return expect, places

    def check(self, node: Node) -> tuple[dict, dict]:
        """The `check:` block as plain values, and each key's place: the analysis knows the
        rules and checks the values (an unknown rule id is an error at its place there)."""
        values, places = {}, {}
        for key, value in self.mapping(node, "check", CHECK_KEYS).items():
            values[key] = plain(value) if isinstance(value.value, list) else value.value
            places[key] = place_of(value)
            for index, item in enumerate(value.value if isinstance(value.value, list) else ()):
                places[(key, index)] = place_of(item)      # a rule id in a list is located itself
        return values, places


def load_spec(path: str | Path, text: str | bytes | None = None) -> ModelSpec:
    """Read and check one model file."""
    path = str(path)
    if text is None:
        text = read_regular(path, "model", MAX_CHARS)
    # Loading keeps every object it makes and makes no cycles: the collector's passes over
    # the growing heap would find nothing (half the time of loading a 10,000-line graph).
    with gc_paused():
        return Loader(path).model(parse_yaml(text, path))


def shown_path(path: str, model_path: str) -> str:
    """A source path as reports show it: resolved against the model file's folder, then
    relative to the current directory when it is inside it."""
    if not os.path.isabs(path):
        path = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(model_path)), path))
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def is_name(text: str) -> bool:
    """A name: ASCII identifiers joined by dots, where a segment after the first may be an
    integer (`G.0.weight`, as PyTorch names it). Read without a pattern, whose compiling
    would cost every start-up more than all the names of a model take to read."""
    if not text.isascii():
        return False
    if text.isidentifier():   # most names
        return True
    first, *rest = text.split(".")
    if not first.isidentifier():
        return False
    for segment in rest:
        if not (segment.isidentifier() or segment.isdigit()):
            return False
    return True


def place_of(at) -> Place:
    if isinstance(at, Place):
        return at
    if isinstance(at, tuple):
        return Place(*at)
    return Place(at.line, at.col)


def kind_of(value) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: f"the string {value!r}", bool: f"{value}".lower()
            }.get(type(value), f"the number {value!r}")


def plain(node: Node):
    """The plain Python value of a node tree (lists and scalars; used for `value:`)."""
    stack, root = [(node, None, None)], []
    while stack:
        current, parent, slot = stack.pop()
        v = current.value
        if isinstance(v, list):
            out = [None] * len(v)
            stack.extend((child, out, i) for i, child in enumerate(v))
        else:
            out = v
        if parent is None:
            root.append(out)
        else:
            parent[slot] = out
    return root[0]


def first_leaf(node: Node, bad) -> Node | None:
    """The first scalar of a node tree, in file order, whose value is ``bad``: where to point."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current.value, list):
            stack.extend(reversed(current.value))
        elif bad(current.value):
            return current
    return None


class NotNumbers(ValueError):
    """A value: list holds something other than numbers (a string, a mapping, null, a bool)."""


def nested_shape(value) -> tuple:
    """The shape of a rectangular nested list of numbers (ValueError otherwise)."""
    shape, level = [], [value]
    while level and isinstance(level[0], list):
        sizes = {len(v) if isinstance(v, list) else -1 for v in level}
        if len(sizes) != 1 or -1 in sizes:
            raise ValueError("nested lists are not rectangular")
        shape.append(sizes.pop())
        level = [x for v in level for x in v]
    if any(isinstance(x, (list, dict, str)) or x is None or isinstance(x, bool) for x in level):
        raise NotNumbers("values must be numbers")
    return tuple(shape)
