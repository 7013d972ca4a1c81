"""Initial values of parameters and inputs.

A tensor's values depend only on the model's seed and the tensor's own name
(the generator is seeded from both), so adding a parameter never changes the
initial values of another.
"""

from __future__ import annotations

import math

import numpy as np

INT64 = 2 ** 63
RANDOM = frozenset({"normal", "uniform", "glorot", "he", "randint"})

try:    # the built-in module: OpenSSL's, behind hashlib, takes milliseconds to load
    from _sha256 import sha256
except ImportError:   # Python 3.12+ names it _sha2
    try:
        from _sha2 import sha256
    except ImportError:
        from hashlib import sha256


def generator(seed: int, name: str) -> np.random.Generator:
    digest = sha256(name.encode()).digest()
    return np.random.default_rng([seed, int.from_bytes(digest[:8], "little")])


def fans(shape: tuple) -> tuple[int, int]:
    """(fan_in, fan_out): [in, out] for a matrix used as x @ w; OIHW for conv kernels."""
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = int(np.prod(shape[2:]))
    return shape[1] * receptive, shape[0] * receptive


def initial_value(kind: str, args: tuple, shape: tuple, dtype, seed: int, name: str):
    """One tensor's values; ``args`` are numbers (dim names already resolved).

    Only random kinds create a generator (constants never load numpy.random).
    """
    if kind not in RANDOM:
        fill = {"zeros": 0, "ones": 1}.get(kind, args[0] if args else 0)
        return np.full(shape, fill, dtype=dtype)
    rng = generator(seed, name)
    if kind == "normal":
        mean, std = args or (0.0, 1.0)
        return rng.normal(mean, std, size=shape).astype(dtype, copy=False)
    if kind == "uniform":
        return rng.uniform(args[0], args[1], size=shape).astype(dtype, copy=False)
    if kind == "glorot":
        fan_in, fan_out = fans(shape)
        bound = np.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-bound, bound, size=shape).astype(dtype, copy=False)
    if kind == "he":
        return rng.normal(0.0, np.sqrt(2.0 / fans(shape)[0]), size=shape).astype(dtype, copy=False)
    return rng.integers(int(args[0]), int(args[1]), size=shape).astype(dtype, copy=False)


def init_problem(kind: str, args: tuple, shape: tuple = ()) -> str | None:
    """Why these init arguments (dim names resolved) cannot make values for ``shape``, or None."""
    if kind in ("glorot", "he") and len(shape) < 2:
        return (f"{kind} needs a weight of at least 2 axes (fan-in and fan-out), not shape {list(shape)}; "
                "use normal(mean, std), uniform(low, high) or zeros")
    if not all(finite(a) for a in args):
        return f"arguments must be finite numbers, got {args}"
    if kind == "normal" and args and args[1] < 0:
        return f"the standard deviation must not be negative, got {args[1]}"
    if kind == "uniform" and args[0] > args[1]:
        return f"uniform(low, high) needs low <= high, got {args}"
    if kind == "uniform" and not finite(args[1] - args[0]):
        return f"uniform(low, high): the range high - low is too large for a float, got {args}"
    if kind == "randint":
        if not all(float(a).is_integer() for a in args):
            return f"randint(low, high) takes integers, got {args}"
        if not -INT64 <= args[0] < args[1] < INT64:
            return f"randint(low, high) needs low < high (high excluded, 64-bit integers), got {args}"
    return None


def value_problem(value, is_int: bool) -> str | None:
    """Why the numbers of a `value:` list cannot be this tensor's, or None: floats are
    never truncated into an int tensor, and every number must fit its dtype."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif is_int and not isinstance(item, int):
            return f"{item!r} is not a whole number, and the tensor is dtype: int (never truncated)"
        elif is_int and not -INT64 <= item < INT64:
            return f"{item} does not fit in a 64-bit integer"
        elif not is_int and isinstance(item, int) and not finite(item):
            return f"{item} is too large for a float"   # NaN and infinities are deliberate values
    return None


def finite(value) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:   # an int beyond any float
        return False


def default_init(shape: tuple, is_param: bool, is_int: bool) -> tuple[str, tuple]:
    """glorot for >= 2-D parameters, zeros for 0/1-D ones (ones for gains: see ``first_used_as_gain``);
    normal(0, 1) for float inputs, zeros for int."""
    if is_param:
        return ("glorot", ()) if len(shape) >= 2 else ("zeros", ())
    return ("zeros", ()) if is_int else ("normal", (0.0, 1.0))


def first_used_as_gain(nodes, candidates: dict) -> list:
    """The names among ``candidates`` (tape index -> name) whose first use on the tape is an
    input the op table marks as a gain (layer_norm's gamma). Such a parameter defaults to
    ones, as in PyTorch: zeros there would silently zero every gradient that passes."""
    pending, found = dict(candidates), []
    for node in nodes:
        if not pending:
            break
        for k, parent in enumerate(node.parents):
            name = pending.pop(parent.index, None)
            if name is not None and k in node.op.gains:
                found.append(name)
    return found
