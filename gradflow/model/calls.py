"""Calls in a model's expressions: an op (its arguments bound to the op's tensor inputs
and static attributes, each checked), ``split``/``chunk``, a module or ``repeat``.

The handlers of ``Evaluator`` for ``ast.Call``; they record on the same tape.
"""

from __future__ import annotations

import ast

from gradflow.engine import ALIASES, OPS
from gradflow.engine.ops import REQUIRED
from gradflow.errors import did_you_mean, static_text
from gradflow.model.expr import dotted_name

PIECES = ("split", "chunk")   # multi-output calls: not ops (an op has one output)


class Calls:
    """Evaluator's call handlers (it gives fail, tensor, static, apply, builder and scope)."""

    def eval_Call(self, node):
        name = dotted_name(node.func)
        if name == "repeat":
            return self.builder.call_repeat(self, node)
        if name in PIECES:
            return self.pieces(name, node)
        spec = self.builder.spec
        if name in spec.instances or name in spec.modules:   # builder.is_callable_module, inline: once a call
            return self.builder.call_module(self, name, node)
        op_name = ALIASES.get(name, name)
        if op_name not in OPS and (name in self.scope.tensors or name in self.scope.dims):
            raise self.fail(node.func, f"{name!r} is a {'tensor' if name in self.scope.tensors else 'dim'}, "
                                       "not an op or a module: it cannot be called")
        if op_name not in OPS:
            candidates = list(OPS) + list(ALIASES) + self.builder.callable_names()
            raise self.fail(node.func, f"unknown op {name!r}{did_you_mean(name, candidates)}")
        return self.call_op(OPS[op_name], node)

    def pieces(self, name: str, node):
        """split(x, size, axis=0) / chunk(x, n, axis=0): several outputs, each a slice of x (a
        getitem node), as torch.split and torch.chunk cut them; unpacked by `a, b: chunk(...)`."""
        if len(node.args) != 2 or any(k.arg != "axis" for k in node.keywords):
            raise self.fail(node, f"{name}(x, {'size' if name == 'split' else 'n'}, axis=0) takes a tensor, "
                                  "a whole number and an optional axis")
        x = self.tensor(node.args[0])
        count = self.static(node.args[1], f"the {'size' if name == 'split' else 'number of chunks'}")
        axis = self.static(node.keywords[0].value, "axis") if node.keywords else 0
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise self.fail(node.args[1], f"{name} needs a whole number of at least 1, not {static_text(count)}")
        if not isinstance(axis, int) or isinstance(axis, bool) or not -len(x.shape) <= axis < len(x.shape):
            raise self.fail(node, f"{name}: axis {static_text(axis)} does not fit shape {list(x.shape)}")
        size = x.shape[axis]
        step = count if name == "split" else -(-size // count)     # chunk: ceil(size / n), as torch
        lead = (slice(None),) * (axis % len(x.shape))
        return tuple(self.apply("getitem", node, x, index=lead + (slice(start, min(start + step, size)),))
                     for start in range(0, size, step))

    def call_op(self, op, node):
        args = node.args
        if not node.keywords and len(args) == len(op.inputs) and op.name in UNBOUND:
            # One argument per tensor input and nothing else (tanh(h)): bind would match exactly
            # these, with no attribute to check and no seed to draw (UNBOUND: the ops that take
            # a fixed number of tensors, whose every attribute has a default, unseeded).
            return self.apply(op, node, *self.operands(op, [self.eval(a) for a in args], args))
        tensors, attrs = self.bind(op, node)
        if op.seeded and "seed" not in attrs:
            attrs["seed"] = self.builder.seed_for(self.entry, node)
        return self.apply(op, node, *tensors, **attrs)

    def bind(self, op, node):
        """Match a call's arguments to the op's tensor inputs and static attributes."""
        args = list(node.args)
        if op.variadic:
            if not args or not isinstance(args[0], (ast.List, ast.Tuple)):
                raise self.fail(node, f"{op.name}() takes a list of tensors first, e.g. {op.name}([a, b], axis=0)")
            tensor_nodes, args = list(args[0].elts), args[1:]
            names = []
        else:
            names = list(op.inputs)
            tensor_nodes, args = args[:len(names)], args[len(names):]
        attr_names = list(op.attrs)
        if len(args) > len(attr_names):
            raise self.fail(args[len(attr_names)], f"{op.name}() takes {op.signature}: too many arguments")
        attr_nodes = dict(zip(attr_names, args))
        given = dict(zip(names, tensor_nodes))
        for kw in node.keywords:
            if kw.arg in given or kw.arg in attr_nodes:
                raise self.fail(kw, f"{op.name}() got argument {kw.arg!r} twice")
            if kw.arg in names:
                given[kw.arg] = kw.value
            elif kw.arg in op.attrs:
                attr_nodes[kw.arg] = kw.value
            else:
                hint = did_you_mean(kw.arg, names + attr_names)
                raise self.fail(kw, f"{op.name}() has no argument {kw.arg!r}{hint}; it takes {op.signature}")
        missing = [n for n in names if n not in given] + [
            n for n in attr_names if op.attrs[n] is REQUIRED and n not in attr_nodes]
        if missing or (op.variadic and not tensor_nodes):
            raise self.fail(node, f"{op.name}() takes {op.signature}: missing {', '.join(missing) or 'tensors'}")
        nodes = [given[n] for n in names] if names else tensor_nodes
        tensors = self.operands(op, [self.eval(n) for n in nodes], nodes)
        attrs = {k: self.static(v, f"argument {k!r} of {op.name}()") for k, v in attr_nodes.items()}
        for name, value in attrs.items():
            self.check_attr(op, name, value, attr_nodes[name])
        return tensors, attrs

    def check_attr(self, op, name: str, value, node) -> None:
        """Refuse a static argument of the wrong kind before any array meets it."""
        default, what = op.attrs[name], f"argument {name!r} of {op.name}()"
        if isinstance(value, str) != (isinstance(default, str) or name in op.modes):   # a mode (gelu's approximate)
            raise self.fail(node, f"{what} cannot be a string" if isinstance(value, str)
                            else f"{what} must be a string such as "
                                 f"{default if isinstance(default, str) else op.modes[name][0]!r}, not {static_text(value)}")
        if isinstance(default, bool) and not isinstance(value, bool):
            raise self.fail(node, f"{what} must be True or False, not {static_text(value)}")
        if isinstance(default, float) and not is_number(value):
            raise self.fail(node, f"{what} must be a number, not {static_text(value)}")
        if name == "seed" and not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            raise self.fail(node, f"{what} must be a non-negative integer, not {static_text(value)}")


# Ops that a call may give only their tensors: a fixed number of them, no attribute required,
# no seed to draw per call.
UNBOUND = frozenset(op.name for op in OPS.values() if not op.variadic and not op.seeded
                    and all(v is not REQUIRED for v in op.attrs.values()))


def is_number(value) -> bool:
    """A static number: an int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
