"""Model file -> validated ModelSpec. Every rejection names FILE:LINE:COL.

The YAML is read by ``source.parse_yaml`` (line/column marks, duplicate keys
refused, no tags, bounded aliases); this module checks the format's sections and
parses each graph expression with the allowlist of ``expr.py``.
"""

from __future__ import annotations

from pathlib import Path

from gradflow.engine import gc_paused
from gradflow.errors import did_you_mean
from gradflow.model.dims import parse_dim
from gradflow.model.expr import parse_expression
from gradflow.model.files import read_regular
from gradflow.model.reader import RESERVED, kind_of, place_of, plain
from gradflow.model.source import MAX_CHARS, Node, parse_yaml
from gradflow.model.spec import STATUSES, Entry, InstanceSpec, LossSpec, ModelSpec, ModuleSpec, Place
from gradflow.model.tensors import TensorReader

FORMAT_VERSION = 1
TOP_KEYS = ("gradflow", "name", "description", "seed", "source", "dims", "inputs", "params", "modules",
            "instances", "graph", "losses", "expect", "check")
ENTRY_KEYS = ("expr", "source")
MODULE_KEYS = ("inputs", "dims", "params", "graph", "output", "outputs", "description")
CHECK_KEYS = ("select", "ignore", "strict", "vanishing", "exploding", "max-memory")


class Loader(TensorReader):
    """Checks one file's sections; raises ModelError at the first problem."""

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


