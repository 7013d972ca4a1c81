"""Shape rules: each op's output shape from its input shapes and attributes alone.

They never allocate an array (models with 10**11 parameters are shape-checked)
and raise ShapeError with a message that names the op and both shapes, in the
style ``concat along axis 1 of [3, 4] and [2, 4]: other axes differ``. The tape
puts the op's name in front of messages that do not start with it.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from gradflow.errors import ShapeError, static_text


def fmt(shape) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def same_shape(x, **_):
    return x


def scalar_attrs_shape(*names):
    """A same-shape rule that also insists the named attributes are plain numbers (or None)."""
    def rule(x, **attrs):
        for name in names:
            value = attrs.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ShapeError(f"{name} must be a number, not {static_text(value)}")
        return x
    return rule


def broadcast_shape(*shapes):
    """numpy's broadcasting rule on shapes alone."""
    if len(shapes) == 2 and shapes[0] == shapes[1] and shapes[0].__class__ is tuple:   # nothing to broadcast
        return shapes[0]
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(-ndim, 0):
        sizes = {s[i] for s in shapes if len(s) >= -i} - {1}
        if len(sizes) > 1:
            raise ShapeError("cannot broadcast " + " and ".join(fmt(s) for s in shapes))
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def is_int(n) -> bool:
    return isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_))


def norm_axes(axis, ndim, shape=None) -> tuple[int, ...]:
    """Normalise an axis attribute (None, int or sequence, negatives allowed) to a sorted tuple."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if is_int(axis) else tuple(axis)
    out = []
    for a in axes:
        if not is_int(a) or not -ndim <= a < ndim:
            raise ShapeError(f"axis {a} is out of range for shape {fmt(shape or ())}")
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated axis in {axis}")
    return tuple(sorted(out))


def norm_axis(axis, ndim, shape=None) -> int:
    """One axis (an int, negatives allowed) normalised to 0..ndim-1."""
    if not is_int(axis):
        raise ShapeError(f"axis must be one integer, got {axis!r}")
    return norm_axes(axis, ndim, shape)[0]


def reduce_shape(x, axis=None, keepdims=False, **_):
    axes = norm_axes(axis, len(x), x)
    if keepdims:
        return tuple(1 if i in axes else n for i, n in enumerate(x))
    return tuple(n for i, n in enumerate(x) if i not in axes)


def arg_shape(x, axis=None, keepdims=False):
    if axis is not None:
        norm_axis(axis, len(x), x)  # argmax takes one axis or all of them
    return reduce_shape(x, axis, keepdims)


def axis_shape(x, axis=-1, **_):
    norm_axes(axis, len(x), x)
    return x


def matmul_shape(a, b):
    if not a or not b:
        raise ShapeError(f"matmul of {fmt(a)} and {fmt(b)}: operands must have at least one axis")
    aa = (1,) + a if len(a) == 1 else a
    bb = b + (1,) if len(b) == 1 else b
    if aa[-1] != bb[-2]:
        raise ShapeError(f"matmul of {fmt(a)} and {fmt(b)}: {aa[-1]} != {bb[-2]}")
    try:
        batch = broadcast_shape(aa[:-2], bb[:-2])
    except ShapeError:
        raise ShapeError(f"matmul of {fmt(a)} and {fmt(b)}: batch axes do not broadcast") from None
    return batch + aa[-2:-1] * (len(a) > 1) + bb[-1:] * (len(b) > 1)


def index_shape(x, index=(), **_):
    """Shape of ``x[index]`` for basic indexing, from a zero-stride stand-in (no memory)."""
    stand_in = as_strided(np.zeros(1, dtype=np.int8), shape=x, strides=(0,) * len(x))
    try:
        return stand_in[index].shape
    except IndexError as e:
        raise ShapeError(f"index {format_index(index)} does not fit shape {fmt(x)}: {e}") from None


def format_index(index) -> str:
    def one(i):
        if i is None:
            return "None"
        if i is Ellipsis:
            return "..."
        if isinstance(i, slice):
            parts = ["" if v is None else str(v) for v in (i.start, i.stop, i.step)]
            return ":".join(parts[:2] if i.step is None else parts)
        return str(i)
    items = index if isinstance(index, tuple) else (index,)
    return "[" + ", ".join(one(i) for i in items) + "]"


def as_sizes(shape) -> tuple:
    return (shape,) if is_int(shape) else tuple(shape)


def reshape_shape(x, shape):
    target = as_sizes(shape)
    where = f"reshape of {fmt(x)} to {fmt(target)}"
    if any(not is_int(n) or n < -1 for n in target):
        raise ShapeError(f"{where}: sizes must be integers >= 0, or -1 once")
    if target.count(-1) > 1:
        raise ShapeError(f"{where}: only one size may be -1")
    size, known = math.prod(x), math.prod(n for n in target if n != -1)
    if -1 not in target:
        if size != known:
            raise ShapeError(f"{where}: {size} elements do not fit {known}")
        return target
    if known == 0 or size % known:
        shown = "[" + ", ".join("?" if n == -1 else str(n) for n in target) + "]"
        raise ShapeError(f"{where}: {size} elements do not fill {shown}")
    return tuple(size // known if n == -1 else n for n in target)


def transpose_shape(x, axes=None):
    if axes is None:
        return x[::-1]
    perm = as_sizes(axes)
    ok = all(is_int(a) and -len(x) <= a < len(x) for a in perm) and \
        sorted(a % len(x) for a in perm) == list(range(len(x)))
    if not ok:
        raise ShapeError(f"transpose of {fmt(x)} with axes {fmt(perm)}: "
                         f"not a permutation of the {len(x)} axes")
    return tuple(x[a] for a in perm)


def expand_dims_shape(x, axis):
    axes = (axis,) if is_int(axis) else tuple(axis)
    new = norm_axes(axes, len(x) + len(axes), x)
    rest = iter(x)
    return tuple(1 if i in new else next(rest) for i in range(len(x) + len(axes)))


def squeeze_shape(x, axis=None):
    if axis is None:
        return tuple(n for n in x if n != 1)
    axes = norm_axes(axis, len(x), x)
    wide = [a for a in axes if x[a] != 1]
    if wide:
        raise ShapeError(f"squeeze of {fmt(x)} along axis {wide[0]}: size {x[wide[0]]} is not 1")
    return tuple(n for i, n in enumerate(x) if i not in axes)


def broadcast_to_shape(x, shape):
    target = as_sizes(shape)
    where = f"broadcast_to of {fmt(x)} to {fmt(target)}"
    if any(not is_int(n) or n < 0 for n in target):
        raise ShapeError(f"{where}: sizes must be integers >= 0")
    if len(x) > len(target):
        raise ShapeError(f"{where}: cannot remove axes")
    for n, m in zip(x[::-1], target[::-1]):
        if n not in (1, m):
            raise ShapeError(f"{where}: {n} cannot become {m}")
    return target


def concat_shape(*xs, axis=0):
    if not xs:
        raise ShapeError("concat of no tensors")
    first = xs[0]
    if not first or any(len(s) != len(first) for s in xs):
        raise ShapeError("concat of " + " and ".join(fmt(s) for s in xs) +
                         ": tensors need the same number of axes, at least one")
    a = norm_axis(axis, len(first), first)
    if any(s[:a] + s[a + 1:] != first[:a] + first[a + 1:] for s in xs):
        raise ShapeError(f"concat along axis {axis} of " + " and ".join(fmt(s) for s in xs) +
                         ": other axes differ")
    return first[:a] + (sum(s[a] for s in xs),) + first[a + 1:]


def stack_shape(*xs, axis=0):
    if not xs:
        raise ShapeError("stack of no tensors")
    if any(s != xs[0] for s in xs):
        raise ShapeError("stack of " + " and ".join(fmt(s) for s in xs) + ": shapes differ")
    a = norm_axis(axis, len(xs[0]) + 1, xs[0])
    return xs[0][:a] + (len(xs),) + xs[0][a:]


def take_shape(x, idx, axis=None):
    if axis is None:
        return idx
    a = norm_axis(axis, len(x), x)
    return x[:a] + idx + x[a + 1:]


def take_along_axis_shape(x, idx, axis):
    if len(idx) != len(x):
        raise ShapeError(f"take_along_axis of {fmt(x)} with index {fmt(idx)}: "
                         f"the index needs {len(x)} axes")
    a = norm_axis(axis, len(x), x)
    try:
        rest = broadcast_shape(x[:a] + x[a + 1:], idx[:a] + idx[a + 1:])
    except ShapeError:
        raise ShapeError(f"take_along_axis of {fmt(x)} with index {fmt(idx)}: "
                         f"axes other than {axis} do not broadcast") from None
    return rest[:a] + (idx[a],) + rest[a:]


def scan_shape(x, axis, **_):
    """A scan or a sort along one axis of x (which has at least one)."""
    if not x:
        raise ShapeError("needs a tensor of at least one axis, got a scalar")
    norm_axis(axis, len(x), x)
    return x


def searchsorted_shape(boundaries, x, right=False):
    """x's shape: boundaries has one axis, or x's number of axes and x's leading ones, as torch's."""
    if not boundaries or len(boundaries) > 1 and (len(x) != len(boundaries) or x[:-1] != boundaries[:-1]):
        raise ShapeError(f"boundaries {fmt(boundaries)} for values {fmt(x)}: boundaries need one axis, or the "
                         "values' number of axes and all but the last of their sizes")
    if not isinstance(right, (bool, np.bool_)):
        raise ShapeError(f"right must be True or False, not {static_text(right)}")
    return x


def scatter_shape(x, idx, src, axis):
    """scatter(x, idx, src, axis): idx with x's number of axes, no longer than x along the others;
    src broadcast to idx's shape."""
    where = f"scatter into {fmt(x)} at index {fmt(idx)}"
    if not x or len(idx) != len(x):
        raise ShapeError(f"{where}: the index needs {len(x)} axes, at least one")
    a = norm_axis(axis, len(x), x)
    if any(i > n for d, (i, n) in enumerate(zip(idx, x)) if d != a):
        raise ShapeError(f"{where}: the index is longer than x along an axis other than {axis}")
    try:
        broadcast_to_shape(src, idx)
    except ShapeError:
        raise ShapeError(f"{where}: values {fmt(src)} do not broadcast to the index's shape") from None
    return x


def one_hot_shape(idx, n):
    if not is_int(n) or n < 0:
        raise ShapeError(f"one_hot needs a class count n >= 0, got {n!r}")
    return idx + (n,)


def multinomial_shape(p, n, replacement=False, seed=0):
    if not p:
        raise ShapeError("multinomial needs weights [..., C], got a scalar")
    if not is_int(n) or n < 1:
        raise ShapeError(f"multinomial draws n >= 1 classes, got {static_text(n)}")
    if not replacement and n > p[-1]:
        raise ShapeError(f"multinomial cannot draw {n} of {p[-1]} classes without replacement")
    return p[:-1] + (n,)


def flatten_shape(x, start_dim=0, end_dim=-1):
    if not x:
        return (1,)
    start, end = norm_axis(start_dim, len(x)), norm_axis(end_dim, len(x))
    if start > end:
        raise ShapeError(f"flatten of {fmt(x)}: start_dim {start_dim} comes after end_dim {end_dim}")
    return x[:start] + (math.prod(x[start:end + 1]),) + x[end + 1:]


def permute_shape(x, dims):
    return transpose_shape(x, dims)
