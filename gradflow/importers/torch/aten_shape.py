"""aten shape, slicing and conversion ops -> gradflow expressions (reshape, transpose, slices); advanced
indexing is in ``aten_index.py``, ops that lay a tensor out anew (pad, roll, tril) in ``aten_layout.py``."""

from __future__ import annotations

from gradflow.importers.torch.aten_index import INDEX_OPS
from gradflow.importers.torch.aten_layout import LAYOUT_OPS
from gradflow.importers.torch.call import Alias, Parts, Unsupported, index_text, operand, shape_text, text


def permutation(c, order):
    return f"transpose({c.args[0]}, axes={text(tuple(d % c.ndim() for d in order))})"


def transpose(c):
    order = list(range(c.ndim()))
    d0, d1 = c.args[1] % c.ndim(), c.args[2] % c.ndim()
    order[d0], order[d1] = order[d1], order[d0]
    return permutation(c, order)


def last_two_swapped(c):
    """x.mT and x.mH (of a real x): its last two axes swapped."""
    order = list(range(c.ndim()))
    order[-2:] = order[-1], order[-2]
    return permutation(c, order)


def reshape(c):
    return f"reshape({c.args[0]}, {shape_text(c.shape)})"


def broadcast(c):
    return f"broadcast_to({c.args[0]}, {text(tuple(c.shape))})"


def broadcast_tensors(c):
    """Each tensor broadcast to the common shape (itself where it already has it)."""
    out = []
    for name, shape in zip(c.args[0], c.shapes[0]):
        out.append(Alias(name) if tuple(shape) == tuple(c.shape) else f"broadcast_to({name}, {text(tuple(c.shape))})")
    return Parts(out)


def concat(op):
    return lambda c: f"{op}([{', '.join(c.args[0])}], axis={c.arg(1, 'dim', 0)})"


def slice_(c):
    dim, start, end, step = c.arg(1, "dim", 0), c.arg(2, "start"), c.arg(3, "end"), c.arg(4, "step", 1)
    size = c.shapes[0][dim % c.ndim()]
    end = None if end is not None and end >= size else end
    item = f"{'' if start in (None, 0) else start}:{'' if end is None else end}" + (f":{step}" if step != 1 else "")
    return c.args[0] + index_text(c.ndim(), dim, item)


def select(c):
    return c.args[0] + index_text(c.ndim(), c.args[1], str(c.args[2]))


def index_select(c):
    idx = c.args[2] if c.ndim(2) else f"reshape({c.args[2]}, [1])"   # a 0-d index selects one, keeping the axis
    return f"take({c.args[0]}, {idx}, axis={c.args[1] % c.ndim()})"


def gather(c):
    return f"take_along_axis({c.args[0]}, {c.args[2]}, axis={c.args[1] % c.ndim()})"


def pieces(c, sizes, dim) -> Parts:
    dim, start, out = dim % c.ndim(), 0, []
    for size in sizes:
        out.append(c.args[0] + index_text(c.ndim(), dim, f"{start}:{start + size}"))
        start += size
    return Parts(out)


def split(c):
    dim, total = c.arg(2, "dim", 0), c.shapes[0][c.arg(2, "dim", 0)]
    size = c.args[1]
    sizes = list(size) if isinstance(size, (list, tuple)) else \
        [min(size, total - s) for s in range(0, total, size)]
    return pieces(c, sizes, dim)


def chunk(c):
    dim = c.arg(2, "dim", 0)
    total = c.shapes[0][dim]
    size = -(-total // c.args[1])
    return pieces(c, [min(size, total - s) for s in range(0, total, size)], dim)


def tensor_split(c):
    """torch.tensor_split: n pieces, the first ones one longer; or cut before each index (an empty
    piece where an index is not past the one before)."""
    dim = c.arg(2, "dim", 0) % c.ndim()
    total = c.shapes[0][dim]
    if c.overload == "sections":
        q, r = divmod(total, c.args[1])
        return pieces(c, [q + 1] * r + [q] * (c.args[1] - r), dim)
    if c.overload != "indices":
        raise Unsupported("with a tensor of indices")
    cuts = [0] + [min(max(i + total if i < 0 else i, 0), total) for i in c.args[1]] + [total]
    return Parts([c.args[0] + index_text(c.ndim(), dim, f"{a}:{max(a, b)}") for a, b in zip(cuts, cuts[1:])])


def unbind(c):
    dim = c.arg(1, "dim", 0) % c.ndim()
    return Parts([c.args[0] + index_text(c.ndim(), dim, str(i)) for i in range(c.shapes[0][dim])])


def converted(x: str, source, target) -> str:
    """x, of kind ``source``, as a tensor of kind ``target`` (x itself where gradflow holds both
    alike): gradflow holds floats, ints, and bools as 0/1 floats."""
    if source == target or (source == "bool" and target == "float"):
        return x
    if target == "float":
        return f"{x} * 1.0"
    if target == "bool":
        return f"not_equal({x}, 0)"
    if target == "int":   # fractions cut off toward zero, as torch's; a bool's 0/1 as integers
        return f"to_int({x})"
    raise Unsupported(f"from {source} to {target}")


def convert(c):
    """`.to(dtype)`, `.double()`, `.long()`."""
    x = converted(c.args[0], c.kinds[0], c.kind)
    return Alias(x) if x == c.args[0] else x


def identity(c):
    return Alias(c.args[0])


def copy(c):
    """``self.copy_(src)``: src, in self's kind and shape (what copy_ writes in place)."""
    src, source = c.args[1], c.kinds.get(1)
    if source != c.kind and not (source == "bool" and c.kind == "float"):
        if c.kind != "float":
            raise Unsupported(f"from {source} to {c.kind}")
        src = f"{src} * 1.0"
    if tuple(c.shapes[1]) != tuple(c.shape):
        return f"broadcast_to({src}, {text(tuple(c.shape))})"
    return Alias(src) if src == c.args[1] else src


def fill(value):
    """``self.fill_(value)``, ``self.zero_()``: value everywhere in self's shape."""
    def handler(c):
        if c.kind != "float":
            raise Unsupported(f"of a {c.kind} tensor")
        filled = c.args[1] if value is None else value
        return f"broadcast_to({filled if isinstance(filled, str) else operand(float(filled))}, {text(tuple(c.shape))})"
    return handler


SHAPE_OPS = {
    **{op: lambda c: f"transpose({c.args[0]})" for op in ("t", "numpy_T", "matrix_H")},   # matrix_H: x.H, real
    "transpose": transpose,
    "mT": last_two_swapped, "mH": last_two_swapped,
    "permute": lambda c: permutation(c, c.args[1]),
    **{op: reshape for op in ("view", "reshape", "_unsafe_view", "flatten", "unflatten", "squeeze",
                              "unsqueeze", "view_as", "reshape_as")},
    **{op: broadcast for op in ("expand", "expand_as", "broadcast_to")},
    "broadcast_tensors": broadcast_tensors,
    **{op: identity for op in ("contiguous", "clone", "alias", "lift_fresh_copy")},
    "copy": copy, "fill": fill(None), "zero": fill(0.0),
    **{op: convert for op in ("to", "_to_copy", "type_as")},
    "cat": concat("concat"), "concat": concat("concat"), "stack": concat("stack"),
    "slice": slice_, "select": select, "gather": gather, "index_select": index_select,
    "split": split, "split_with_sizes": split, "chunk": chunk, "unbind": unbind,
    "tensor_split": tensor_split,
    **INDEX_OPS, **LAYOUT_OPS,
}
