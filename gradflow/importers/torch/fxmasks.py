"""Writes through a boolean mask of what was read through it: ``l[(u > 0) & (l == u)] -= 1``,
``h[h > 0] *= 0.5``, ``h[m] = h[m] * 2 + y[m]``.

A masked read has a size known only from the mask's values, which no gradflow tensor can
have. But what such a write writes is elementwise in its masked reads, so it is the same
elementwise work on the whole tensors, written where the mask holds: ``where(mask, f(h, y),
h)``, with torch's values and gradients. The fx graph is rewritten so before it is
translated: each masked read becomes the tensor it reads, each in-place op between them its
out-of-place form, each of them of the whole tensor's shape; aten_index's ``index_put``
writes a value of the whole shape with a ``where``. Anything else read through a mask keeps
its data-dependent shape, which the translator refuses.
"""

from __future__ import annotations

import torch

from gradflow.importers.torch.fxgraph import data_dependent, kind_of, shape_of, target_name

SIZES = ("sym_size",)   # export's own reads of a masked size, for its assertions
# The ops that may stand between the reads and the write. Each entry the mask leaves out is worked
# out too, and gets a gradient of 0 from the write's where: these give it 0 on, whatever the
# entry holds (sqrt's g / (2 sqrt(x)) would give 0 / 0 at an entry x == 0 the mask left out,
# where torch, which never computes it, gives nothing): ops whose derivative is finite at every
# finite entry. A quotient divides masked values only, by a number or a 0-d tensor; a power
# raises them to a number of at least 1.
FINITE = ("add", "sub", "rsub", "neg", "mul", "clamp", "clamp_min", "clamp_max", "abs", "relu")


def lift_masked_writes(graph) -> None:
    """Rewrite each write through a mask of what is elementwise in reads through the same mask."""
    for put in list(graph.nodes):
        mask_at = masked_put(put)
        if mask_at is not None:
            region = elementwise_in_reads(put, mask_at)
            if region is not None:
                lift(region, shape_of(put.args[0]))


def masked_put(node) -> int | None:
    """The axis of the one boolean mask ``node`` writes a data-dependent value through
    (``x[mask] = f(x[mask])``, not accumulating), or None."""
    if node.op != "call_function" or target_name(node.target) not in ("index_put", "index_put_"):
        return None
    if len(node.args) > 3 and node.args[3] or not isinstance(node.args[2], torch.fx.Node):
        return None
    found = [d for d, i in enumerate(node.args[1]) if i is not None]
    if len(found) != 1 or kind_of(node.args[1][found[0]]) != "bool" or not data_dependent(node.args[2]):
        return None
    return found[0]


def elementwise_in_reads(put, d: int) -> dict | None:
    """The nodes the written value is made of, each marked "read" (a read through the same mask of
    a tensor of the written one's shape) or "op" (an op of finite derivative on those and numbers),
    used nowhere else; None when it is made otherwise."""
    indices, shape = put.args[1], shape_of(put.args[0])
    region, stack = {}, [put.args[2]]
    while stack:
        node = stack.pop()
        if node in region:
            continue
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            return None
        if target_name(node.target) == "index":
            if not same_indices(node.args[1], indices, d) or shape_of(node.args[0]) != shape:
                return None
            region[node] = "read"
            continue
        masked = [arg for arg in node.all_input_nodes if data_dependent(arg)]
        if not finite_derivative(node, masked):
            return None
        if any(shape_of(arg) not in ((), (1,)) for arg in node.all_input_nodes if arg not in masked):
            return None   # a whole tensor beside masked ones
        region[node] = "op"
        stack.extend(masked)
    inside = set(region) | {put}
    if any(user not in inside and target_name(user.target) not in SIZES for node in region for user in node.users):
        return None   # a masked value read elsewhere (summed, returned) needs its own shape
    return region


def finite_derivative(node, masked: list) -> bool:
    """Is the op's derivative in its masked arguments finite at every finite entry?"""
    packet = target_name(node.target).rstrip("_")
    if packet == "div":
        return node.args[1] not in masked
    if packet == "pow":
        exponent = node.args[1]
        return node.args[0] in masked and isinstance(exponent, (int, float)) and exponent >= 1
    return packet in FINITE


def same_indices(these, those, d: int) -> bool:
    """Do two index lists index alike: a mask at d alone, the same node or the same call on the same
    arguments (export gives each ``x < 0`` written out its own node)?"""
    if len(these) != len(those) or any((i is None) != (j is None) for i, j in zip(these, those)):
        return False
    a, b = these[d], those[d]
    return a is b or (isinstance(a, torch.fx.Node) and isinstance(b, torch.fx.Node) and a.op == b.op == "call_function"
                      and a.target == b.target and a.args == b.args and a.kwargs == b.kwargs)


def lift(region: dict, shape) -> None:
    """The reads become what they read, the ops out-of-place ops of the whole shape."""
    for node, role in region.items():
        if role == "read":
            node.replace_all_uses_with(node.args[0])
            continue
        packet = target_name(node.target)
        if packet.endswith("_"):   # h[m] *= 0.5 multiplies the read in place: the read is gone now
            node.target = getattr(getattr(torch.ops.aten, packet[:-1]), node.target._overloadname)
        node.meta["val"] = torch.empty(shape, dtype=node.meta["val"].dtype, device="meta")
