"""aten advanced indexing -> gradflow expressions: x[i, j] with index tensors, writes through a
mask or indices (index_put), take_along_dim.

Index tensors on several axes gather one axis at a time: ``take`` along the first indexed
axis with the first index (broadcast with the others), then ``take_along_axis`` along each
next one, so that each result entry reads the entry its indices name together, and the
gradients of repeated entries add up as torch's do. A write through a boolean mask is a
``where``; an accumulating write through indices adds each value where ``one_hot`` of its
index says. gradflow's number literals are floats, and an index must stay an integer: an
axis's size, added to a negative index, is an integer made by ``argmax`` (``integer``).
"""

from __future__ import annotations

from gradflow.importers.torch.call import Unsupported, shape_text, text


def indexed(c):
    """The (axis, index tensor) pairs of aten.index / index_put's list (None: a whole axis), and
    the index tensors' kinds."""
    kinds = c.kinds.get(1) or ()
    found = [(d, i) for d, i in enumerate(c.args[1]) if i is not None]
    return found, [kinds[d] if d < len(kinds) else None for d, _ in found]


def integer(n: int) -> str:
    """The integer n as a 0-d integer tensor: where the one 1.0 after n zeros is."""
    return f"argmax(concat([broadcast_to(0.0, ({n},)), broadcast_to(1.0, (1,))]))" if n else \
        "argmax(broadcast_to(1.0, (1,)))"


def from_end(i: str, n: int) -> str:
    """An integer index with its negative entries counted from the end of an axis of n, as torch's."""
    return f"where({i} < 0, {i} + {integer(n)}, {i})"


def broadcast_of(shapes) -> list:
    """The shape that tensors of these shapes broadcast to."""
    n = max(len(s) for s in shapes)
    out = [1] * n
    for s in shapes:
        for k, size in enumerate([1] * (n - len(s)) + list(s)):
            out[k] = size if out[k] == 1 else out[k]
    return out


def adjacent(c, dims):
    """x with its indexed axes next to each other, and where they start: in place when they are
    already, else first (torch puts the indexed result first then)."""
    if dims == list(range(dims[0], dims[-1] + 1)):
        return c.args[0], dims[0], list(c.shapes[0])
    rest = [d for d in range(c.ndim()) if d not in dims]
    order = dims + rest
    return f"transpose({c.args[0]}, axes={text(tuple(order))})", 0, [c.shapes[0][d] for d in order]


def index(c):
    found, kinds = indexed(c)
    if any(k == "bool" for k in kinds):
        raise Unsupported("with a boolean mask among several indices")
    if len(found) == 1:   # take counts negative indices from the end itself
        return f"take({c.args[0]}, {found[0][1]}, axis={found[0][0]})"
    dims = [d for d, _ in found]
    if any(c.shapes[0][d] == 0 for d in dims):
        raise Unsupported("of an empty axis with several index tensors")
    x, d, shape = adjacent(c, dims)
    spread = broadcast_of([c.shapes[1][a] for a in dims])
    first = found[0][1]
    if list(c.shapes[1][dims[0]]) != spread:
        first = f"broadcast_to({first}, {text(tuple(spread))})"
    out, nb = f"take({x}, {first}, axis={d})", len(spread)
    after = shape[d + 1:]   # [pre..., B..., after...] now: the next indexed axes, then the rest
    for (a, i), n in zip(found[1:], after):
        own = list(c.shapes[1][a])
        lined = [1] * d + [1] * (nb - len(own)) + own + [1] * len(after)
        gathered = f"take_along_axis({out}, reshape({from_end(i, n)}, {shape_text(lined)}), axis={d + nb})"
        after = after[1:]
        out = f"reshape({gathered}, {shape_text(shape[:d] + spread + after)})"
    return out


def index_put(c):
    """``x[mask] = v`` and ``x[i] += v`` (index_put, and index_put_ written in place)."""
    found, kinds = indexed(c)
    if c.kind != "float" and c.kinds.get(2) != c.kind:
        raise Unsupported(f"of a {c.kinds.get(2)} value into a {c.kind} tensor")
    if len(found) == 1 and kinds[0] == "bool":
        return mask_put(c, *found[0])
    if any(k == "bool" for k in kinds):
        raise Unsupported("with a boolean mask among several indices")
    if not c.arg(3, "accumulate", False):
        raise Unsupported("through integer indices without accumulate=True (torch leaves which of repeated "
                          "indices is written undefined); write through a boolean mask, or build the new value "
                          "with torch.where")
    return add_at(c, found)


def mask_put(c, d: int, mask: str) -> str:
    """``where(mask, v, x)``, the mask and the values lined up with x's axes: torch broadcasts
    the values to x[mask]'s shape, whose axis d is the masked entries. Values of x's own shape
    are what a write of what it read through the mask made of all of x (fxmasks.py)."""
    shape, m, values = list(c.shapes[0]), len(c.shapes[1][d]), c.args[2]
    own = list(c.shapes[2])
    if len(shape) > d + m:
        mask = f"reshape({mask}, {shape_text(list(c.shapes[1][d]) + [1] * (len(shape) - d - m))})"
    if own == shape:
        return f"where({mask}, {values}, {c.args[0]})"
    rank = len(shape) - m + 1
    if len(own) > rank:
        raise Unsupported("with values of more axes than what they are written into")
    lined = [1] * (rank - len(own)) + own
    if lined[d] != 1:
        raise Unsupported("with a value per written entry (only values that broadcast over them)")
    lined = lined[:d] + [1] * m + lined[d + 1:]
    if trimmed(lined) != trimmed(own):   # more than leading axes of 1 apart
        values = f"reshape({values}, {shape_text(lined)})"
    return f"where({mask}, {values}, {c.args[0]})"


def trimmed(shape: list) -> list:
    """A shape without its leading axes of 1 (broadcasting adds them back)."""
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def add_at(c, found) -> str:
    """x plus each value at its indices: one_hot of each index, multiplied, says where; summed
    over the indices' axes (with ``where``, so that an infinite value adds only where it goes)."""
    dims = [d for d, _ in found]
    if dims != list(range(dims[0], dims[-1] + 1)):
        raise Unsupported("with index tensors on axes apart")
    shape, d = list(c.shapes[0]), dims[0]
    sizes, rest = [shape[a] for a in dims], shape[dims[-1] + 1:]
    spread = broadcast_of([c.shapes[1][a] for a in dims])
    nb, nl = len(spread), len(dims)
    hots = []
    for k, (a, i) in enumerate(found):   # [B..., 1.., size_k, 1.., 1 for each of rest]
        own = list(c.shapes[1][a])
        lined = [1] * (nb - len(own)) + own + [1] * k + [sizes[k]] + [1] * (nl - k - 1 + len(rest))
        hots.append(f"reshape(one_hot({from_end(i, sizes[k])}, {sizes[k]}), {shape_text(lined)})")
    own = list(c.shapes[2])
    if len(own) > d + nb + len(rest):
        raise Unsupported("with values of more axes than what they are written into")
    lined = [1] * (d + nb + len(rest) - len(own)) + own   # [before..., B..., rest...]
    values = f"reshape({c.args[2]}, {shape_text(lined[:d + nb] + [1] * nl + lined[d + nb:])})"
    spots = nl + len(rest)
    added = f"where({' * '.join(hots)}, {values}, 0.0)"
    if nb:
        added = f"sum({added}, axis={text(tuple(range(-spots - nb, -spots)))})"
    return f"{c.args[0]} + {added}"


def take_along_dim(c):
    if c.arg(2, "dim") is None:   # both flattened
        idx = c.args[1] if c.ndim(1) == 1 else f"reshape({c.args[1]}, [-1])"
        return f"take_along_axis(reshape({c.args[0]}, [-1]), {idx}, axis=0)"
    return f"take_along_axis({c.args[0]}, {c.args[1]}, axis={c.arg(2, 'dim') % c.ndim()})"


INDEX_OPS = {"index": index, "index_put": index_put, "take_along_dim": take_along_dim}
