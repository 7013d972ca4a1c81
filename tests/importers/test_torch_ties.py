"""Exact ties in max and min reductions, where torch's reductions disagree with each other:
torch.amax / amin and max() / min() without a dim share the gradient among the tied entries,
torch.max(x, dim) gives it to the one whose index it returns. ReLU's zeros tie often."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import gradflow  # noqa: E402

TIES = """
class Ties(nn.Module):
    def __init__(self, reduce):
        super().__init__()
        self.lin, self.reduce = nn.Linear(4, 6), reduce
        with torch.no_grad():   # rows 0 and 1 and rows 2, 3 and 4 alike: their outputs tie exactly
            self.lin.weight[1] = self.lin.weight[0]
            self.lin.bias[1] = self.lin.bias[0]
            self.lin.weight[3] = self.lin.weight[4] = self.lin.weight[2]
            self.lin.bias[3] = self.lin.bias[4] = self.lin.bias[2]

    def forward(self, x):
        h = self.lin(x)
        r = {
            "amax": lambda: h.amax(dim=1).sum() + torch.relu(h - 10.0).amax(dim=0).sum(),  # relu: all zero
            "amin": lambda: h.amin(dim=(0, 1)) + h.amin(dim=1, keepdim=True).sum(),
            "max_all": lambda: h.max() + h.min(),
            "max_dim": lambda: h.max(dim=1).values.sum() + h.min(dim=1)[0].sum(),
        }[self.reduce]()
        return {"loss": r * 3.0}


def step(reduce):
    torch.manual_seed(0)
    return {"module": Ties(reduce), "inputs": (torch.randn(5, 4).abs(),)}


def amax():
    return step("amax")


def amin():
    return step("amin")


def max_all():
    return step("max_all")


def max_dim():
    return step("max_dim")
"""


@pytest.mark.parametrize("func", ["amax", "amin", "max_all", "max_dim"])
def test_tied_maxima_and_minima_share_or_select_the_gradient_as_torch(step_file, same_as_torch, func):
    path, _ = step_file(TIES)
    report = gradflow.analyze(gradflow.load(f"{path}:{func}"))
    same_as_torch(report, path, func)
