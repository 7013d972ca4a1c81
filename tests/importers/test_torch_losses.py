"""Losses, distances and norms against PyTorch: vector norms of every order, torch.dist and
linalg.norm; values and gradients compared at zeros and ties."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from gradflow.errors import ModelError  # noqa: E402
from gradflow.importers import import_python  # noqa: E402
from tests.importers.conftest import check  # noqa: E402


NORMS = """
class Norms(nn.Module):
    def __init__(self):
        super().__init__()
        # a tie of +3 and -3 with a zero, a zero row, distinct entries, a tie of two 2s and a 0.5
        self.x = nn.Parameter(torch.tensor([[3.0, -3.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0],
                                            [2.0, -1.0, 2.0, 0.5], [0.7, -0.2, 1.3, -2.1]]))
        self.y = nn.Parameter(torch.tensor([[1.0, -3.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0],
                                            [2.0, 1.0, -2.0, 0.5], [0.1, 0.2, 0.3, 0.4]]))

    def forward(self, w):
        x, y, out = self.x, self.y, {}
        for name, order in {"one": 1, "inf": float("inf"), "neg_inf": -float("inf"), "half": 0.5,
                            "one_and_half": 1.5, "three": 3, "neg_one": -1.0}.items():
            rows = torch.linalg.vector_norm(x, ord=order, dim=1)
            out[name] = (rows * w).sum() + torch.linalg.vector_norm(x, ord=order) \\
                + (torch.linalg.vector_norm(x, ord=order, dim=0, keepdim=True) * w).sum() \\
                + torch.dist(x, y, p=order)
        out["count"] = torch.linalg.vector_norm(x, ord=0, dim=1).sum()
        out["forms"] = torch.norm(x, p=3, dim=1).sum() + F.normalize(x, p=1).pow(2).sum() \\
            + torch.linalg.norm(x, ord=1, dim=1).sum() + torch.linalg.norm(x, ord=float("inf"), dim=0).sum() \\
            + torch.linalg.norm(x, "fro") + torch.linalg.norm(x) + torch.dist(x, y) + x.norm(p=1.5)
        return out


def step():
    return {"module": Norms(), "inputs": (torch.tensor([1.0, 2.0, 3.0, 4.0]),)}
"""


def test_import_vector_norms_of_every_order_give_torch_gradients_at_zeros_and_ties(step_file, same_as_torch):
    path, _ = step_file(NORMS)
    report = check(path, "step", same_as_torch)
    assert report.status("x", "count") == "blocked"   # a count of non-zeros: no gradient, in torch too


def test_a_matrix_norm_of_linalg_norm_is_refused(step_file):
    path, _ = step_file(NORMS.replace('torch.linalg.norm(x, "fro")', 'torch.linalg.norm(x, 1)'))
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:step")
    assert "aten.linalg_norm.default with ord=1 over two axes (a matrix norm)" in caught.value.message
