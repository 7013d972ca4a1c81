"""Checked expression trees -> tape nodes: one handler per allowed ``ast`` node type.

Values are either tape Tensors or static Python values (numbers, dim sizes,
tuples, slices, strings for keyword arguments). Static numbers are folded; a
static value in a tensor position becomes a constant; a tensor where a static
argument (``axis``, a shape, an index) is expected is an error with a place.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

import numpy as np

from gradflow.engine import ALIASES, OPS, Tensor
from gradflow.errors import ModelError, ShapeError, did_you_mean, static_text
from gradflow.model.calls import Calls, is_number
from gradflow.model.expr import BINARY, COMPARE, dotted_name

FOLD = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b, "pow": lambda a, b: a ** b}
# ops whose integer inputs, whole numbers beside them included, give an integer (int with int gives int)
INTEGER_KEEPING = frozenset({"add", "sub", "mul", "remainder", "fmod", "floor_divide", "trunc_divide", "maximum",
                             "minimum", "where"})


@dataclass(slots=True, unsafe_hash=True, repr=False)
class NodeInfo:
    """What the analysis needs to name a tape node: its graph entry, op and place, and the
    top-level graph entry whose evaluation made it (``call``: two calls of one module are
    told apart by it; None for parameters and inputs). Never changed once made; not declared
    frozen because a frozen dataclass's constructor costs a microsecond or two per node."""
    entry: str
    op: str
    line: int
    col: int
    call: str | None = None
    file: str | None = None      # the file of line and col: the model's, or an imported model's .py


class Scope:
    """Names visible to one graph: tensors so far, and dim sizes."""

    def __init__(self, prefix: str, tensors: dict, dims: dict, later: dict, what: str):
        self.prefix = prefix          # "" at top level, "critic." inside instance critic
        self.tensors = tensors        # name -> Tensor or tuple of Tensors
        self.dims = dims              # name -> int
        self.later = later            # graph names defined further down -> their entry keys
        self.what = what              # "graph" or "module 'mlp'"
        self.current = None           # the Entry being evaluated


def later_names(graph: list) -> dict:
    """Graph names not yet defined -> their Entry (for forward references and cycles)."""
    return {target: entry for entry in graph for target in entry.targets}


class Evaluator(Calls):
    """Evaluates one expression tree in a scope, recording ops on the builder's tape."""

    def __init__(self, builder, scope: Scope, entry: str):
        self.builder = builder
        self.tape = builder.tape
        self.scope = scope
        self.entry = entry            # qualified entry name for reports ("critic.h")

    def fail(self, node, message) -> ModelError:
        source = self.scope.current.source if self.scope.current is not None else None
        if source is not None:     # an imported model: the user's line, not the generated text
            return ModelError(message, source.file, source.line, source.col)
        return ModelError(message, self.builder.path, node.lineno, node.col_offset)

    def tensor(self, node) -> Tensor:
        return self.as_tensor(self.eval(node), node)

    def static(self, node, what: str):
        value = self.eval(node)
        if isinstance(value, Tensor) or isinstance(value, tuple) and any(isinstance(v, Tensor) for v in value):
            raise self.fail(node, f"{what} must be a constant, not a tensor")
        return value

    def eval(self, node):
        if node.__class__ is ast.Name:   # the commonest node: a name this scope holds (lookup's first case)
            value = self.scope.tensors.get(node.id)
            if value is not None:
                return value
        handler = HANDLERS.get(node.__class__)
        if handler is None:  # expr.check refused these already; keep the engine safe regardless
            raise self.fail(node, f"{type(node).__name__} is not allowed")
        return handler(self, node)

    # -- leaves ------------------------------------------------------------------
    def eval_Constant(self, node):
        return self.number(node.value, node) if is_number(node.value) else node.value

    def number(self, value, node):
        """A number the engine can hold: an int within 64 bits or a finite float."""
        if isinstance(value, int) and not -2 ** 63 <= value < 2 ** 63:
            digits = len(str(abs(value))) if value.bit_length() < 20000 else "thousands of"
            raise self.fail(node, f"the number ({digits} digits) is too large: numbers must fit in 64 bits")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(node, f"the number is {value}: it overflows a float")
        return value

    def eval_Name(self, node):
        return self.lookup(node.id, node)

    def eval_Attribute(self, node):
        return self.lookup(dotted_name(node), node)

    def lookup(self, name: str, node):
        scope = self.scope
        if name in scope.tensors:
            return scope.tensors[name]
        if name in scope.dims:
            return scope.dims[name]
        if name in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[name]
        if name in scope.later:
            raise self.fail(node, self.builder.forward_reference(scope, name))
        if name in self.builder.model.inputs:   # data (masks, tables) is visible everywhere
            return self.builder.model.inputs[name]
        if name in self.builder.spec.params or name in later_names(self.builder.spec.graph):
            raise self.fail(node, f"{name!r} is not visible in {scope.what}: modules see their "
                                  "inputs, their own params, the model's inputs and dims; pass it in")
        if name in OPS or name in ALIASES:
            raise self.fail(node, f"{name!r} is an op, not a value: call it, e.g. {name}(x)")
        if name in self.builder.spec.modules or name in self.builder.spec.instances:
            what = "a module" if name in self.builder.spec.modules else "an instance"
            raise self.fail(node, f"{name!r} is {what}, not a value: call it on its inputs, e.g. {name}(x)")
        head, _, attr = name.rpartition(".")
        if head in scope.tensors:
            op = {"T": "transpose"}.get(attr, attr if attr in OPS else None)
            advice = f"use {op}({head})" if op else f"call an op on {head!r}"
            raise self.fail(node, f"{name!r}: tensors have no attributes (a dotted name is one name); {advice}")
        hint = did_you_mean(name, list(scope.tensors) + list(scope.dims))
        raise self.fail(node, f"undefined name {name!r}{hint}")

    def eval_List(self, node):
        return tuple(self.eval(e) for e in node.elts)

    eval_Tuple = eval_List

    # -- arithmetic ----------------------------------------------------------------
    def eval_UnaryOp(self, node):
        value = self.eval(node.operand)
        if isinstance(node.op, ast.UAdd):
            return value
        if isinstance(value, Tensor):
            return self.apply("neg", node, value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value
        raise self.fail(node, f"cannot negate {static_text(value)}")

    def eval_BinOp(self, node):
        spine = []                     # a + b + c + ...: left to right in a loop, not by recursion
        while isinstance(node, ast.BinOp):
            spine.append(node)
            node = node.left
        a = self.eval(node)
        for op_node in reversed(spine):
            name, b = BINARY[type(op_node.op)], self.eval(op_node.right)
            if is_number(a) and is_number(b):
                a = self.fold(name, a, b, op_node)
            else:
                a = self.apply(name, op_node, *self.operands(OPS[name], (a, b), (op_node.left, op_node.right)))
        return a

    def eval_Compare(self, node):
        name = COMPARE[type(node.ops[0])]
        return self.apply(name, node, self.tensor(node.left), self.tensor(node.comparators[0]))

    def operands(self, op, values, nodes) -> list:
        """The values of an op's tensor inputs as tensors. A Python int beside integer tensors
        is an integer constant where the op keeps integers (``n - 1``, ``maximum(n, 0)``), as
        in numpy and torch, so the result can still index; elsewhere numbers are floats."""
        if op.name in INTEGER_KEEPING and any(v.__class__ is int for v in values):
            taking = [v for k, v in enumerate(values) if op.sets_dtype(k)]
            if all(v.__class__ is int or isinstance(v, Tensor) and np.dtype(v.dtype).kind in "iu" for v in taking):
                return [self.tape.leaf(np.int64(v)) if v.__class__ is int and op.sets_dtype(k) else self.as_tensor(v, n)
                        for k, (v, n) in enumerate(zip(values, nodes))]
        return [self.as_tensor(v, n) for v, n in zip(values, nodes)]

    def as_tensor(self, value, node) -> Tensor:
        """``value``, the value of ``node``, as a tensor: a number becomes a constant."""
        if isinstance(value, Tensor):
            return value
        if is_number(value):
            return self.tape.constant(value)
        if isinstance(value, tuple) and isinstance(node, ast.Call):   # the outputs of split or chunk
            raise self.fail(node, f"expected a tensor, got {len(value)}: split and chunk give several; "
                                  "unpack them (a, b: chunk(x, 2)) or take one (chunk(x, 2)[0])")
        raise self.fail(node, f"expected a tensor or a number, got {static_text(value)}")

    def fold(self, name, a, b, node):
        if name == "matmul":
            raise self.fail(node, "'@' needs tensors, not numbers")
        if name == "pow" and (abs(b) > 64 or abs(a) > 2 ** 64):
            raise self.fail(node, "constant power too large")
        try:
            value = FOLD[name](a, b)
        except (ZeroDivisionError, OverflowError) as e:
            raise self.fail(node, f"constant arithmetic failed: {e}") from None
        if isinstance(value, complex):
            raise self.fail(node, f"constant arithmetic gives a complex number: ({a!r}) ** {b!r}")
        return self.number(value, node)

    # -- subscripts ----------------------------------------------------------------
    def eval_Subscript(self, node):
        value = self.eval(node.value)
        if isinstance(value, tuple) and isinstance(node.value, ast.Call):   # chunk(x, 2)[0]: one output
            k = self.static(node.slice, "the index of an output")
            if not isinstance(k, int) or isinstance(k, bool) or not -len(value) <= k < len(value):
                what = "a slice" if isinstance(k, slice) else static_text(k)
                raise self.fail(node.slice, f"the outputs are numbered 0 to {len(value) - 1}: take one by "
                                            f"its number, not {what}")
            return value[k]
        x = self.as_tensor(value, node.value)
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        index = [self.index_item(item) for item in items]
        tensor_at = [i for i, v in enumerate(index) if isinstance(v, Tensor)]
        if len(tensor_at) > 1:
            raise self.fail(node, "only one tensor index is allowed in a subscript")
        if not tensor_at:
            return self.apply("getitem", node, x, index=tuple(index))
        k = tensor_at[0]
        idx = index[k]
        if any(not isinstance(v, slice) and v is not Ellipsis for v in index[:k] + index[k + 1:]):
            raise self.fail(node, "a tensor index can only be combined with ':' and '...'")
        before = index[:k]
        axis = sum(v is not Ellipsis for v in before)
        if Ellipsis in before:  # '...' stands for every axis the other items do not consume
            axis += len(x.shape) - (len(index) - 1)
        index[k] = slice(None)
        if any(v != slice(None) for v in index if v is not Ellipsis):
            x = self.apply("getitem", node, x, index=tuple(index))
        return self.apply("take", node, x, idx, axis=axis)

    def eval_Slice(self, node):
        parts = [None if p is None else self.static(p, "a slice bound") for p in (node.lower, node.upper, node.step)]
        if any(p is not None and (not isinstance(p, int) or isinstance(p, bool)) for p in parts):
            raise self.fail(node, "slice bounds must be integers")
        return slice(*parts)

    def index_item(self, item):
        value = self.eval(item)
        if isinstance(value, Tensor) or value is None or value is Ellipsis or isinstance(value, slice):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise self.fail(item, f"an index must be an integer, a slice, None, ... or an integer tensor, "
                              f"not {static_text(value)}")

    # -- recording -------------------------------------------------------------------
    def apply(self, op, node, *tensors, **attrs) -> Tensor:
        name, builder = op if op.__class__ is str else op.name, self.builder
        source = self.scope.current.source if self.scope.current is not None else None
        if source is None:
            info = NodeInfo(self.entry, name, node.lineno, node.col_offset, builder.calling_entry, builder.path)
        else:
            info = NodeInfo(self.entry, name, source.line, source.col, builder.calling_entry, source.file)
        try:
            out = self.tape.apply(op, *tensors, meta=info, **attrs)
        except (ShapeError, TypeError, ValueError) as e:
            # an imported model's error is at the user's line: the generated entry means nothing there
            raise self.fail(node, f"graph.{self.entry} ({builder.path}:{node.lineno}): {e}" if source is None
                            else str(e)) from None
        if source is None:
            builder.admit(out, node, "graph.", self.entry)
        else:
            builder.admit(out, source, "")   # the user's call: its graph lines mean nothing to them
        return out


# The handler of each node type, looked up by the node's class (not by name, per node).
HANDLERS = {getattr(ast, name[5:]): method for cls in (Calls, Evaluator) for name, method in vars(cls).items()
            if name.startswith("eval_")}
