"""Advanced indexing, writes through masks and indices, and ops that lay a tensor out anew, against
PyTorch: q[torch.arange(B), actions], x[:, i, j], nq[dones.bool()] = 0, index_put with
accumulate, F.pad, flip, roll, repeat, tril...; values and gradients compared."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import gradflow  # noqa: E402
from gradflow.errors import ModelError  # noqa: E402
from gradflow.importers import import_python  # noqa: E402
from tests.importers.conftest import check  # noqa: E402


# a weighted sum: every entry of t counts with its own weight, so a misplaced entry shows
WEIGHTED = """
def weighted(t):
    return (t * torch.arange(1.0, t.numel() + 1).reshape(t.shape)).sum()

"""

SEVERAL_INDICES = WEIGHTED + """
class Picks(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 6)

    def forward(self, x, actions, i, j, k, i3, i0, j0, k0):
        q = self.lin(x)                                    # [6, 6]
        q3 = q.reshape(2, 3, 6)
        return {"dqn": weighted(q[torch.arange(6), actions]),
                "repeated": weighted(q[actions, actions])
                            + weighted(q[torch.tensor([1, 1, -5]), torch.tensor([2, 2, 2])]),
                "spread": weighted(q[i, j]),               # [4] with [2, 1]: [2, 4]
                "inner": weighted(q3[:, i3, j]),        # indexed axes adjacent: they stay in place
                "apart": weighted(q3[k, :, j]),            # indexed axes apart: they go first
                "three": weighted(q3[k, i3, j]) + weighted(q3[k, :, j][:, :, 1]),
                "single": weighted(q[i0, j0]) + weighted(q3[k0, :, j0]) + weighted(q3[k0, i3, j0])}


def step():
    torch.manual_seed(0)
    return {"module": Picks(), "inputs": (torch.randn(6, 4), torch.tensor([0, 5, 4, 4, -1, -6]),
                                          torch.tensor([0, -1, 2, 2]), torch.tensor([[1], [-3]]),
                                          torch.tensor([[1], [-2]]), torch.tensor([0, -1, 2, 2]),
                                          torch.tensor([-2]), torch.tensor([3]), torch.tensor([-1]))}
"""


def test_import_indexing_with_several_index_tensors_gives_torch_values_and_gradients(step_file, same_as_torch):
    """Repeated indices add up their gradients; negative ones count from the end; index shapes
    broadcast; a constant index (arange) is one as any other."""
    path, _ = step_file(SEVERAL_INDICES)
    check(path, "step", same_as_torch)


OUT_OF_RANGE = """
class Picks(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 6)

    def forward(self, x, actions):
        return {"loss": self.lin(x)[torch.arange(3), actions].sum()}   # @pick


def step():
    return {"module": Picks(), "inputs": (torch.randn(3, 4), torch.tensor([0, 1, {bad}]))}
"""


@pytest.mark.parametrize("bad", [6, -7])
def test_import_index_out_of_range_is_an_error_at_its_line(step_file, bad):
    """torch raises for an index outside -size..size-1: so does gradflow, where a wrapped or
    joined index would read another entry."""
    path, line_of = step_file(OUT_OF_RANGE.replace("{bad}", str(bad)))
    with pytest.raises(ModelError, match="out of range") as e:
        gradflow.analyze(gradflow.load(f"{path}:step"))
    assert e.value.line == line_of("pick")


MASK_WRITES = WEIGHTED + """
class Writes(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 5)
        self.v = nn.Parameter(torch.tensor([0.5, -1.0, 2.0, 3.0, 1.5]))

    def forward(self, x, dones, flags, i, j):
        q = self.lin(x)                                    # [6, 5]
        nq = q.clone()
        nq[dones.bool()] = 0                               # the DQN target's terminal rows
        every, none = q.clone(), q.clone()
        every[torch.ones(6, dtype=torch.bool)] = 2.0
        none[torch.zeros(6, dtype=torch.bool)] = 2.0
        rows, cols, grid = q.clone(), q.clone(), q.clone()
        rows[dones > 0] = self.v                           # a row of values, broadcast over the masked rows
        cols[:, flags] = self.v[:2].sum()                  # a mask of a later axis
        grid[q > 0.2] = -self.v[0]                         # a mask of every axis
        block = q.reshape(2, 3, 5).clone()
        block[:, q[:3] > 0] = self.v[:2].reshape(2, 1)     # a mask of two later axes, a value per earlier entry
        added = q.index_put((i,), self.v * 3, accumulate=True)     # repeated and negative indices add up
        pairs = q.clone().index_put_((i, j), self.v[:4].reshape(1, 4) ** 2, accumulate=True)
        return {"terminal": weighted(nq), "every": weighted(every), "none": weighted(none),
                "rows": weighted(rows), "cols": weighted(cols), "grid": weighted(grid),
                "added": weighted(added), "pairs": weighted(pairs), "block": weighted(block),
                "functional": weighted(q.index_put((dones.bool(),), torch.tensor(7.0)))}


def step():
    torch.manual_seed(0)
    return {"module": Writes(), "inputs": (torch.randn(6, 4), torch.tensor([0., 1, 0, 1, 1, 0]),
                                           torch.tensor([True, False, True, True, False]),
                                           torch.tensor([2, 2, -1, 0]), torch.tensor([[1], [-5]]))}
"""


def test_import_writes_through_a_mask_or_accumulated_indices_give_torch_values_and_gradients(step_file,
                                                                                                   same_as_torch):
    """x[mask] = v is where(mask, v, x), masks all true and all false too; index_put with
    accumulate=True adds each value at its (repeated, negative) index; the written values get
    torch's gradient."""
    path, _ = step_file(MASK_WRITES)
    check(path, "step", same_as_torch)


INDEX_WRITE = """
class Writes(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 5)

    def forward(self, x, i):
        q = self.lin(x).clone()
        q[i] = 0.0   # @write
        return {"loss": q.sum()}


def step():
    return {"module": Writes(), "inputs": (torch.randn(6, 4), torch.tensor([1, 1, 3]))}
"""


def test_import_write_through_integer_indices_is_refused_at_its_line(step_file):
    """Which of repeated indices wins is undefined in torch: refused, with what to do instead."""
    path, line_of = step_file(INDEX_WRITE)
    with pytest.raises(ModelError, match="without accumulate=True") as e:
        gradflow.load(f"{path}:step")
    assert e.value.line == line_of("write")


LAYOUTS = WEIGHTED + """
class Layouts(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 6)

    def forward(self, x, idx):
        q = self.lin(x)                                    # [5, 6]
        q3 = q.reshape(5, 2, 3)
        return {"padded": weighted(F.pad(q, (1, 2))) + weighted(F.pad(q3, (1, 0, -1, 1, 0, 2), value=3.0))
                          + weighted(F.pad(q, (0, 0))) + weighted(F.pad(q, (0, 0, -2, 0)))
                          + weighted(F.pad(q, (-1, -2, 1, -1), value=-0.5)) + weighted(F.pad(idx, (1, 2), value=3)),
                "modes": weighted(F.pad(q3, (2, 1), mode="reflect")) + weighted(F.pad(q3, (1, 2), mode="replicate"))
                         + weighted(F.pad(q3, (1, 2), mode="circular")),
                "flipped": weighted(torch.flip(q, [0, 1])) + weighted(torch.flip(q3, [-1]))
                           + weighted(torch.flip(q, [])),
                "rolled": weighted(torch.roll(q, 2, 1)) + weighted(torch.roll(q, (1, -1), (0, 1)))
                          + weighted(torch.roll(q, 3)) + weighted(torch.roll(q, 6, 1))
                          + weighted(torch.roll(q3, (1, 2, -1, 1), (0, 2, 1, 0))),
                "repeats": weighted(q.repeat(2, 1, 3)) + weighted(torch.tile(q, (2,)))
                           + weighted(torch.tile(q3, (2, 1))),
                "interleave": weighted(q.repeat_interleave(2, dim=1)) + weighted(q.repeat_interleave(3)),
                "moved": weighted(torch.movedim(q3, 0, 2)) + weighted(torch.movedim(q3, (0, 1), (2, 0)))
                         + weighted(q.narrow(1, 1, 3)) + weighted(q.narrow(0, -2, 2)),
                "made": weighted(q + q.new_zeros(5, 6)) + weighted(q * q.new_ones(6))
                        + weighted(q * q.new_full((5, 1), 7.0)),
                "diagonal": weighted(torch.diag(q[0])) + weighted(torch.diag(q[:, :5])) + weighted(torch.diag(q, 1))
                            + weighted(torch.diag(q, -2)) + weighted(torch.diag(q[1], -2))
                            + weighted(torch.diag(q[2], 3)),
                "triangle": weighted(torch.tril(q)) + weighted(torch.triu(q, -1)) + weighted(torch.tril(q3, 1))
                            + weighted(torch.triu(q, 2)) + weighted(torch.tril(q, -9)) + weighted(torch.triu(q, -9)),
                "embedded": weighted(torch.diag_embed(q)) + weighted(torch.diag_embed(q3, 1))
                            + weighted(torch.diag_embed(q, -2)),
                "outer": weighted(torch.outer(q[0], q[1])),
                "along": weighted(torch.take_along_dim(q, idx[:, None], 1)) + weighted(torch.take_along_dim(q, idx)),
                "pieces": sum(weighted(t) * k for k, t in enumerate(torch.tensor_split(q, 4, dim=1)))
                          + sum(weighted(t) * k for k, t in enumerate(torch.tensor_split(q, [1, -2], dim=0)))}


def step():
    torch.manual_seed(0)
    return {"module": Layouts(), "inputs": (torch.randn(5, 4), torch.tensor([0, 5, 5, 2, 1]))}
"""


def test_import_pad_flip_roll_repeat_and_triangles_give_torch_values_and_gradients(step_file, same_as_torch):
    """Padding of zero width and negative (cropping) width, every pad mode, rolls by a whole
    turn, diagonals above and below, triangles that keep all or nothing."""
    path, _ = step_file(LAYOUTS)
    check(path, "step", same_as_torch)
    rolls = [line.expr for line in import_python(f"{path}:step").graph if line.targets[0].startswith("roll")]
    assert all(expr.count("concat") <= 1 for expr in rolls)   # a roll over several axes: a line per axis


PADS_OVER_AXES = WEIGHTED + """
class Pads(nn.Module):
    def __init__(self):
        super().__init__()
        self.img = nn.Parameter(torch.randn(2, 3, 4, 5))

    def forward(self):
        return {mode: weighted(F.pad(self.img, (2, 1, 1, 2), mode=mode))
                      + weighted(F.pad(self.img, (1, 1, 0, 0), mode=mode))
                for mode in ("reflect", "replicate", "circular")}


def step():
    torch.manual_seed(0)
    return {"module": Pads(), "inputs": ()}
"""


def test_import_pad_modes_over_two_axes_give_torch_values_and_read_each_axis_once(step_file, same_as_torch):
    """Reflect, replicate and circular padding read what they pad up to three times along each
    axis: the first axis's result is a line of its own, which the second reads."""
    path, _ = step_file(PADS_OVER_AXES)
    check(path, "step", same_as_torch)
    pads = [line.expr for line in import_python(f"{path}:step").graph if line.expr.startswith("concat")]
    assert len(pads) == 9 and all(expr.count("concat") == 1 for expr in pads)


MASKED_UPDATES = WEIGHTED + """
class Updates(nn.Module):
    def __init__(self):
        super().__init__()
        self.w, self.v = nn.Parameter(torch.randn(3, 4)), nn.Parameter(torch.randn(3, 4))
        self.r, self.c = nn.Parameter(torch.randn(3)), nn.Parameter(torch.randn(4))

    def forward(self, x):
        h = self.w * x
        l = (x * 2).floor().long()
        l[(l > 0) & (l < 2)] -= 1                        # C51's fix of its bounds: integers
        h[h > 0] *= 0.5                                  # in place on the read
        h[x < 0] = h[x < 0] * 2 + self.v[x < 0]          # several reads, the mask written out each time
        g = self.v.clone()
        g[self.r > 0] = g[self.r > 0].clamp(-0.1, 0.1) * self.r.sum()   # rows, a 0-d tensor beside them
        k = self.v * 1.0
        k[x > 1] = self.w[x > 1]                         # a read alone
        k[:, self.c > 0] += 1.0                          # a mask of a later axis
        k[k < 0] = (k[k < 0] ** 2 - 0.5 * k[k < 0]) / 3.0   # a power, a quotient by a number
        return {"loss": weighted(h * l) + weighted(g ** 2) + weighted(k * x)}


class Elsewhere(nn.Module):
    def __init__(self, root=False):
        super().__init__()
        self.w, self.root = nn.Parameter(torch.randn(3, 4)), root

    def forward(self, x):
        h = self.w * x
        if not self.root:
            v = h[h > 0]  # @read
            h[h > 0] = v * 2
            return {"loss": (h ** 2).sum() + v.sum()}
        # sqrt's gradient at an entry the mask leaves out, 0 here, would be 0 / 0 worked out on all of h
        h[h > 0] = h[h > 0].sqrt()  # @root
        return {"loss": h.sum()}


def step():
    torch.manual_seed(0)
    return {"module": Updates(), "inputs": (torch.randn(3, 4),)}


def elsewhere():
    torch.manual_seed(0)
    return {"module": Elsewhere(), "inputs": (torch.randn(3, 4),)}


def root():
    torch.manual_seed(0)
    return {"module": Elsewhere(root=True), "inputs": (torch.tensor([[1.0, 0.0, -1.0, 2.0]] * 3),)}
"""


def test_a_write_through_a_mask_of_what_it_read_through_it_gives_torch_values_and_gradients(step_file,
                                                                                             same_as_torch):
    """x[m] -= 1, h[h > 0] *= 0.5, h[m] = h[m] * 2 + v[m]: elementwise in the masked reads, so the same
    work on all of h, written where the mask holds."""
    path, _ = step_file(MASKED_UPDATES)
    check(path, "step", same_as_torch)


@pytest.mark.parametrize("func, marker", [("elsewhere", "read"), ("root", "root")])
def test_a_masked_read_used_beyond_the_write_or_by_an_op_of_unbounded_slope_is_refused(step_file, func, marker):
    path, line_of = step_file(MASKED_UPDATES)
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:{func}")
    assert caught.value.line == line_of(marker)
    assert caught.value.message.startswith("unsupported data-dependent shape: the size of what aten.index.Tensor")


DIAGONALS = WEIGHTED + """
class Diagonals(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 6), nn.Linear(4, 6)

    def forward(self, x, y, labels):
        za, zb = F.normalize(self.a(x), dim=-1), F.normalize(self.b(y), dim=-1)
        sim = za @ zb.t() / 0.1                              # [5, 5]: positives on the diagonal
        positives = sim.diagonal()
        negatives = sim.clone().fill_diagonal_(-1e4)         # a square's diagonal written in place
        nce = -(positives - torch.logsumexp(torch.cat([positives[:, None], negatives], 1), 1)).mean()
        t = self.a(x).reshape(5, 2, 3)
        h = self.a(x)                                        # [5, 6]: rectangular
        same = labels[:, None].eq(labels[None, :]).long().fill_diagonal_(0)   # integers stay integers
        return {"nce": nce,
                "apart": weighted(t.diagonal(offset=1, dim1=0, dim2=2)) + weighted(t.diagonal(-2, 2, 0)),
                "wide": weighted(h.diagonal(1)) + weighted(h.diagonal(-3)) + weighted(h.t().diagonal(2)),
                "filled": weighted(h.clone().fill_diagonal_(7.0)) + weighted(sim * same)}


def step():
    torch.manual_seed(0)
    return {"module": Diagonals(), "inputs": (torch.randn(5, 4), torch.randn(5, 4), torch.tensor([0, 1, 0, 2, 1]))}
"""


def test_diagonals_and_fill_diagonal_give_torch_values_and_gradients(step_file, same_as_torch):
    """x.diagonal(offset, dim1, dim2) of any axes, rectangles included, and fill_diagonal_ of a matrix."""
    path, _ = step_file(DIAGONALS)
    check(path, "step", same_as_torch)
