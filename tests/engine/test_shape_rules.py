"""Shape rules: clear ShapeErrors for bad shapes and axes, and no arrays for huge shapes."""

from __future__ import annotations

import re
import tracemalloc

import numpy as np
import pytest

from gradflow.engine import Tape
from gradflow.errors import ShapeError

I = np.int64  # marks an integer input in the table below

# op, input shapes (a tuple ending in I is an integer tensor), attrs, the whole message
BAD = [
    ("reshape", [(3, 4)], {"shape": (5, -1)}, "reshape of [3, 4] to [5, -1]: 12 elements do not fill [5, ?]"),
    ("reshape", [(3, 4)], {"shape": (5, 2)}, "reshape of [3, 4] to [5, 2]: 12 elements do not fit 10"),
    ("reshape", [(3, 4)], {"shape": (-1, -1)}, "reshape of [3, 4] to [-1, -1]: only one size may be -1"),
    ("concat", [(3, 4), (2, 4)], {"axis": 1},
     "concat along axis 1 of [3, 4] and [2, 4]: other axes differ"),
    ("concat", [(3, 4), (4,)], {},
     "concat of [3, 4] and [4]: tensors need the same number of axes, at least one"),
    ("concat", [(3, 4), (3, 4)], {"axis": 2}, "concat: axis 2 is out of range for shape [3, 4]"),
    ("stack", [(3, 4), (3, 5)], {}, "stack of [3, 4] and [3, 5]: shapes differ"),
    ("sum", [(3, 4)], {"axis": 2}, "sum: axis 2 is out of range for shape [3, 4]"),
    ("mean", [(3, 4)], {"axis": (0, -2)}, "mean: repeated axis in (0, -2)"),
    ("softmax", [()], {}, "softmax: axis -1 is out of range for shape []"),
    ("argmax", [(3, 4)], {"axis": (0, 1)}, "argmax: axis must be one integer, got (0, 1)"),
    ("transpose", [(2, 3, 4)], {"axes": (0, 0, 1)},
     "transpose of [2, 3, 4] with axes [0, 0, 1]: not a permutation of the 3 axes"),
    ("expand_dims", [(3, 4)], {"axis": 3}, "expand_dims: axis 3 is out of range for shape [3, 4]"),
    ("squeeze", [(3, 4)], {"axis": 0}, "squeeze of [3, 4] along axis 0: size 3 is not 1"),
    ("broadcast_to", [(3, 4)], {"shape": (2, 4)}, "broadcast_to of [3, 4] to [2, 4]: 3 cannot become 2"),
    ("broadcast_to", [(3, 4)], {"shape": (4,)}, "broadcast_to of [3, 4] to [4]: cannot remove axes"),
    ("add", [(3, 4), (5,)], {}, "add: cannot broadcast [3, 4] and [5]"),
    ("where", [(2,), (3, 4), (4,)], {}, "where: cannot broadcast [2] and [3, 4] and [4]"),
    ("take", [(3, 4), (2, I)], {"axis": 2}, "take: axis 2 is out of range for shape [3, 4]"),
    ("take", [(3, 4), (2,)], {"axis": 0}, "take: argument 'idx' must be an integer tensor, got float64"),
    ("take_along_axis", [(3, 4), (3, I)], {"axis": 1},
     "take_along_axis of [3, 4] with index [3]: the index needs 2 axes"),
    ("take_along_axis", [(3, 4), (2, 1, I)], {"axis": 1},
     "take_along_axis of [3, 4] with index [2, 1]: axes other than 1 do not broadcast"),
    ("layer_norm", [(3, 4), (5,), (4,)], {}, "layer_norm of [3, 4] with gamma [5]: gamma must be [4]"),
    ("cross_entropy", [(3, 4), (5, I)], {}, "cross_entropy of logits [3, 4] and labels [5]: 3 != 5"),
    ("cross_entropy", [(4,), (1, I)], {},
     "cross_entropy of logits [4] and labels [1]: logits must be [N, C] and labels [N]"),
    ("mse", [(3, 4), (3,)], {}, "mse: cannot broadcast [3, 4] and [3]"),
    ("dropout", [(3, 4)], {"p": 1.5}, "dropout probability must be in [0, 1], got 1.5"),
    ("conv2d", [(1, 3, 8, 8), (4, 2, 3, 3)], {}, "conv2d of [1, 3, 8, 8] and [4, 2, 3, 3]: 3 input channels != 2"),
    ("conv2d", [(1, 3, 2, 2), (4, 3, 3, 3)], {},
     "conv2d of [1, 3, 2, 2] and [4, 3, 3, 3]: kernel [3, 3] is larger than the padded input [2, 2]"),
    ("conv2d", [(3, 8, 8), (4, 3, 3, 3)], {},
     "conv2d of [3, 8, 8] and [4, 3, 3, 3]: input must be [N, C, H, W] and weight [O, C, kH, kW]"),
    ("conv2d", [(1, 3, 8, 8), (4, 3, 3, 3)], {"stride": 0},
     "conv2d: stride must be an integer >= 1 or a pair of them, got 0"),
    ("max_pool2d", [(1, 1, 2, 2)], {"kernel": 3}, "max_pool2d: kernel [3, 3] is larger than the input [2, 2]"),
    ("avg_pool2d", [(4,)], {"kernel": 2}, "avg_pool2d: pooling of [4]: needs [..., H, W]"),
    ("conv3d", [(1, 3, 4, 8, 8), (4, 2, 3, 3, 3)], {},
     "conv3d of [1, 3, 4, 8, 8] and [4, 2, 3, 3, 3]: 3 input channels != 2"),
    ("conv3d", [(1, 3, 8, 8), (4, 3, 3, 3)], {},
     "conv3d of [1, 3, 8, 8] and [4, 3, 3, 3]: input must be [N, C, D, H, W] and weight [O, C, kD, kH, kW]"),
    ("conv3d", [(1, 3, 2, 8, 8), (4, 3, 3, 3, 3)], {"padding": (0, 1, 1)},
     "conv3d of [1, 3, 2, 8, 8] and [4, 3, 3, 3, 3]: kernel [3, 3, 3] is larger than the padded input [2, 10, 10]"),
    ("conv3d", [(1, 3, 4, 8, 8), (4, 3, 3, 3, 3)], {"stride": (1, 2)},
     "conv3d: stride must be an integer >= 1 or a triple of them, got (1, 2)"),
    ("max_pool3d", [(1, 1, 2, 2, 2)], {"kernel": (1, 3, 1)},
     "max_pool3d: kernel [1, 3, 1] is larger than the input [2, 2, 2]"),
    ("avg_pool3d", [(4, 4)], {"kernel": 2}, "avg_pool3d: pooling of [4, 4]: needs [..., D, H, W]"),
    ("grid_sample", [(1, 3, 4, 4), (1, 2, 2, 3)], {},
     "grid_sample of [1, 3, 4, 4] at grid [1, 2, 2, 3]: needs x [N, C, H, W] and grid [N, Ho, Wo, 2], or x "
     "[N, C, D, H, W] and grid [N, Do, Ho, Wo, 3]"),
    ("grid_sample", [(2, 3, 4, 4), (1, 2, 2, 2)], {}, "grid_sample of [2, 3, 4, 4] at grid [1, 2, 2, 2]: 2 != 1 samples"),
    ("grid_sample", [(1, 3, 4, 4), (1, 2, 2, 2)], {"mode": "bicubic"},
     'grid_sample: mode must be "bilinear" or "nearest", not \'bicubic\''),
    ("one_hot", [(3, I)], {"n": -1}, "one_hot needs a class count n >= 0, got -1"),
    ("matmul", [(32, 8), (16, 64)], {}, "matmul of [32, 8] and [16, 64]: 8 != 16"),
]


@pytest.mark.parametrize("name,shapes,attrs,message", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_shape_rule_raises_a_clear_shape_error(name, shapes, attrs, message):
    tape = Tape(eager=False)
    inputs = [tape.leaf(shape=s[:-1], dtype=np.int64) if s and s[-1] is I else tape.leaf(shape=s)
              for s in shapes]
    with pytest.raises(ShapeError, match="^" + re.escape(message) + "$"):
        tape.apply(name, *inputs, **attrs)


HUGE = (100_000, 1_000_000)  # 10**11 entries: 800 GB as float64


@pytest.mark.parametrize("name,shapes,attrs", [
    ("matmul", [HUGE, HUGE[::-1]], {}),
    ("sum", [HUGE], {"axis": 1}), ("var", [HUGE], {"axis": 0, "keepdims": True}),
    ("softmax", [HUGE], {}), ("layer_norm", [HUGE, HUGE[1:], HUGE[1:]], {}),
    ("reshape", [HUGE], {"shape": (-1, 1000)}), ("transpose", [HUGE], {}),
    ("getitem", [HUGE], {"index": (slice(None, None, 2), None, 5)}),
    ("broadcast_to", [HUGE[1:]], {"shape": HUGE}), ("concat", [HUGE, HUGE], {"axis": 1}),
    ("stack", [HUGE, HUGE], {}), ("take", [HUGE, (7, I)], {"axis": 1}),
    ("take_along_axis", [HUGE, (HUGE[0], 1, I)], {"axis": 1}),
    ("cross_entropy", [HUGE, (HUGE[0], I)], {}), ("one_hot", [(HUGE[0], I)], {"n": HUGE[1]}),
    ("conv2d", [(1000, 1000, 1000, 1000), (1000, 1000, 3, 3)], {"padding": 1}),
    ("max_pool2d", [(1000, 1000, 1000, 1000)], {"kernel": 2}),
    ("conv3d", [(100, 100, 100, 1000, 1000), (100, 100, 3, 3, 3)], {"padding": 1}),
    ("max_pool3d", [(100, 100, 100, 1000, 1000)], {"kernel": 2}),
    ("grid_sample", [(100, 100, 1000, 1000), (100, 1000, 1000, 2)], {}),
    ("dropout", [HUGE], {"p": 0.5}), ("where", [HUGE, HUGE, ()], {}), ("less", [HUGE, ()], {}),
])
def test_shape_rule_allocates_nothing_for_huge_shapes(name, shapes, attrs):
    tape = Tape(eager=False)
    inputs = [tape.leaf(shape=s[:-1], dtype=np.int64) if s and s[-1] is I else tape.leaf(shape=s)
              for s in shapes]
    tracemalloc.start()
    try:
        out = tape.apply(name, *inputs, **attrs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.value is None and out.size > 0
    assert peak < 100_000, f"{name}'s shape rule used {peak} bytes"
