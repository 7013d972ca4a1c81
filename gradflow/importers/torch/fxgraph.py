"""What the exported fx graph says about its nodes, read without translating them.

A node's aten name and how errors spell it, its output shape and kind (float, int,
bool), whether its size depends on tensor values, which nodes an output depends on,
whether it is a view of its first argument or writes into it in place, and the
graph of a grad-mode block. What the in-place writes change ``fxwrites.py`` reads.
"""

from __future__ import annotations

import operator

import torch

NO_GRAD_HOP = torch.ops.higher_order.wrap_with_set_grad_enabled


def ancestors(graph) -> set:
    """The nodes the graph's output depends on."""
    needed = set()
    needing(needed, next(n for n in reversed(graph.nodes) if n.op == "output"))
    return needed


def needing(needed: set, node) -> list:
    """Adds ``node`` and every node it depends on to ``needed`` (closed under dependence); the
    nodes it added."""
    if node in needed:
        return []
    needed.add(node)
    added, stack = [node], [node]
    while stack:
        for parent in stack.pop().all_input_nodes:
            if parent not in needed:
                needed.add(parent)
                added.append(parent)
                stack.append(parent)
    return added


def aliasing(node) -> bool:
    """Is the node's output a view of its first argument (select, slice, view, t, a split's part)?"""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return aliasing(node.args[0]) if isinstance(node.args[0], torch.fx.Node) else False
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.arguments or not schema.returns:
        return False
    first, out = schema.arguments[0].alias_info, schema.returns[0].alias_info
    return first is not None and out is not None and not first.is_write and not out.is_write


def writes(node) -> bool:
    """Does the call write into its first argument (copy_, mul_, fill_, embedding_renorm_)?"""
    schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    info = schema.arguments[0].alias_info if schema is not None and schema.arguments else None
    return info is not None and info.is_write and bool(node.args) and isinstance(node.args[0], torch.fx.Node)


def block_graph(node):
    """The graph of a grad-mode block: ``wrap_with_set_grad_enabled(enabled, submodule, *args)``."""
    return getattr(node.graph.owning_module, node.args[1].target).graph


def data_dependent(node) -> bool:
    """Does the node's output have a size known only from tensor values (h[x > 0])?"""
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    return any(isinstance(v, torch.Tensor) and not all(isinstance(n, int) for n in v.shape) for v in vals)


def in_place(packet: str) -> bool:
    """relu_, add_: torch's in-place variants (not dunders such as __or__)."""
    return packet.endswith("_") and not packet.startswith("__")


def target_name(target) -> str:
    return target._opname if hasattr(target, "_opname") else getattr(target, "__name__", str(target))


def aten_text(target) -> str:
    """How errors name an aten overload: 'aten.copy_.default'."""
    return f"aten.{target_name(target)}.{target._overloadname}"


def shape_of(value):
    """A node's output shape; for a list of tensors (cat's input, split's output), the list of shapes."""
    if isinstance(value, (list, tuple)):
        return [shape_of(v) for v in value]
    val = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
    if isinstance(val, (list, tuple)) and val and isinstance(val[0], torch.Tensor):
        return tuple(int(n) for n in val[0].shape)
    return tuple(int(n) for n in val.shape) if isinstance(val, torch.Tensor) else None


def kind_of(value) -> str | None:
    """"float", "int" or "bool": what a tensor node holds (a tuple of them for a list: index's indices)."""
    if isinstance(value, (list, tuple)):
        return tuple(kind_of(v) for v in value)
    val = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return None
    if val.dtype == torch.bool:
        return "bool"
    return "float" if val.dtype.is_floating_point else "int"
