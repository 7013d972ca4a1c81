"""The inputs and params sections: each tensor's shape, dtype, init or value, frozen, source."""

from __future__ import annotations

import math

from gradflow.model.calls import is_number
from gradflow.model.expr import parse_init
from gradflow.model.reader import Reader, first_leaf, is_name, kind_of, place_of, plain
from gradflow.model.source import Node
from gradflow.model.spec import Init, TensorSpec

TENSOR_KEYS = {"input": ("shape", "dtype", "init", "value", "source"),
               "param": ("shape", "dtype", "init", "value", "frozen", "source")}


class TensorReader(Reader):
    """Reads tensor declarations, in a model's sections and in its modules'."""

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
