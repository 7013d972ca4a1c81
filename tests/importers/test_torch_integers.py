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
