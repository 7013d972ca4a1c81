"""Integer tensors stay integers through arithmetic with whole numbers and through clamp, as in
torch, so position ids built from a mask (`mask.long().cumsum(-1) - 1`, clamped at 0) can index
an embedding; values and gradients against torch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from gradflow.importers import import_python  # noqa: E402
from tests.importers.conftest import check  # noqa: E402

POSITIONS = """
class Positions(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(6, 2)

    def forward(self, mask, ids):
        pos = (mask.long().cumsum(-1) - 1).clamp(min=0)
        wide = torch.clamp(ids * 2 + 1, 0, 5)
        kept = torch.where(mask.bool(), ids, 0).clamp_max(4)
        half = ids.clamp(min=0.5)                      # a float bound: a float result, as torch's
        return {"loss": self.emb(pos).sum() + (self.emb(wide) * 2).sum() + self.emb(kept).pow(2).sum()
                        + half.sum()}


def step():
    torch.manual_seed(0)
    return {"module": Positions(), "inputs": (torch.tensor([[1, 1, 1, 0]]), torch.tensor([[0, 3, 2, 1]]))}
"""


def test_position_ids_from_a_mask_index_an_embedding_as_in_torch(step_file, same_as_torch):
    path, _ = step_file(POSITIONS)
    check(path, "step", same_as_torch)
    exprs = [line.expr for line in import_python(f"{path}:step").graph]
    assert "clip(ids, 0.5, None)" in exprs and not any("clip(" in e for e in exprs if "0.5" not in e)


CASTS = """
class Categorical51(nn.Module):
    '''C51's projection of the target distribution onto the support: floor and ceil of the
    shifted returns cast to indices, the probabilities added at them with index_add_.'''
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(3, 2 * 5)
        self.emb = nn.Embedding(12, 2)

    def forward(self, x, rewards, scale):
        atoms, vmin, vmax = 5, -2.0, 2.0
        dz = (vmax - vmin) / (atoms - 1)
        support = torch.linspace(vmin, vmax, atoms)
        logits = self.head(x).view(-1, 2, atoms)
        probs = logits.softmax(-1)[:, 0]
        with torch.no_grad():
            target = (rewards.unsqueeze(1) + 0.9 * support).clamp(vmin, vmax)
            b = (target - vmin) / dz
            low, up = b.floor().long(), b.ceil().long()
            projected = torch.zeros(x.shape[0] * atoms)
            offset = (torch.arange(x.shape[0]) * atoms).unsqueeze(1)
            projected.index_add_(0, (low + offset).view(-1), (probs * (up.float() - b)).view(-1))
            projected.index_add_(0, (up + offset).view(-1), (probs * (b - low.float())).view(-1))
        log_p = logits.log_softmax(-1)[:, 1]
        cut = (scale * x[:, 0]).long()                # toward zero: -1.02 -> -1, as torch's
        return {"c51": -(projected.view(-1, atoms) * log_p).sum(1).mean(),
                "bins": self.emb(cut + 4).sum() + cut.float().sum() + (x[:, 0] > 0).long().sum()}


def step():
    torch.manual_seed(0)
    return {"module": Categorical51(),
            "inputs": (torch.tensor([[0.5, -1.2, 2.0], [-0.3, 0.8, -1.1], [1.5, 0.1, 0.2]]),
                       torch.tensor([0.7, -3.0, 1.234]), torch.tensor(3.4))}
"""


def test_float_to_integer_casts_cut_toward_zero_and_index_as_in_torch(step_file, same_as_torch):
    path, _ = step_file(CASTS)
    check(path, "step", same_as_torch)
    exprs = [line.expr for line in import_python(f"{path}:step").graph]
    assert sum(e.startswith("to_int(") for e in exprs) == 4   # floor, ceil, the bins and the bool count


ROUNDED = """
class Rounded(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(6, 2)
        self.w = nn.Parameter(torch.tensor([1.7, -2.5, 0.4]))

    def forward(self, ids):
        picked = self.emb(torch.floor(ids)) + self.emb(torch.ceil(ids)) + self.emb(ids.round()) \\
            + self.emb(torch.trunc(ids)) + self.emb(torch.fix(ids))   # of integers: integers, as torch's
        cut = torch.trunc(self.w * 3) + torch.fix(-self.w)            # of floats: toward zero, no gradient
        return {"loss": picked.sum() + (self.w * cut).sum()}


def step():
    torch.manual_seed(0)
    return {"module": Rounded(), "inputs": (torch.tensor([[0, 3, 5, 1]]),)}
"""


def test_rounding_integer_ids_keeps_them_integers_that_index_as_in_torch(step_file, same_as_torch):
    path, _ = step_file(ROUNDED)
    report = check(path, "step", same_as_torch)
    assert report.status("emb.weight", "loss") == "flows"
    exprs = [line.expr for line in import_python(f"{path}:step").graph]
    assert sum(e.startswith("trunc(") for e in exprs) == 4
