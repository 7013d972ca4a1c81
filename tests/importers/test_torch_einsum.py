"""torch.einsum of three or more operands against PyTorch: values and gradients compared, with
'...' and without '->', and each pair contracted before the next operand joins."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import gradflow  # noqa: E402
import numpy as np  # noqa: E402
from gradflow.importers import import_python  # noqa: E402
from gradflow.importers.torch.target import load_step  # noqa: E402

MANY = """
class Contract(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.randn(3, 4))
        self.b = nn.Parameter(torch.randn(4, 5))
        self.c = nn.Parameter(torch.randn(5, 2))
        self.v = nn.Parameter(torch.randn(2))

    def forward(self, x, batch):
        a, b, c, v = self.a, self.b, self.c, self.v
        n = torch.arange(6.0).reshape(3, 2)
        return {"three": (torch.einsum("ij,jk,kl->il", a, b, c) * n).sum()
                         + torch.einsum("bij,jk,bkl->bil", x, b, batch).square().sum()
                         + torch.einsum("ij,kj,ik->i", a, b.t(), a @ b).sum()
                         + (torch.einsum("ij,ij,ij->j", a, a, a) * torch.arange(4.0)).sum(),
                "four": (torch.einsum("ij,jk,kl,l->i", a, b, c, v) * torch.arange(3.0)).sum()
                        + torch.einsum("ab,cd,ac,bd->", a[:, :2], c, a @ b, c[:2]).square()
                        + (torch.einsum("ij,jk,kl,lm->mi", a, b, c, c.t()) * torch.arange(15.0).reshape(5, 3)).sum(),
                "ellipsis": torch.einsum("...ij,jk,...k->...i", x, b, batch[:, :, 0]).square().sum()
                            + (torch.einsum("bij,...jk,kl->...bil", x, b, c) * torch.arange(12.0).reshape(2, 3, 2)).sum()
                            + torch.einsum("i...,i...,i...->...", a, a, a).sum(),
                "implicit": (torch.einsum("ij,jk,kl", a, b, c) * n).sum()
                            + (torch.einsum("bij,bjk,Bkl", x, b.expand(2, 4, 5), torch.stack([c, c * 2])) * n).sum()
                            + (torch.einsum("...ij,jk,kl", x, b, c) * n).sum()
                            + torch.einsum("Ki,ij,jK", a.t(), a, b @ b.t())}


def step():
    torch.manual_seed(0)
    return {"module": Contract(), "inputs": (torch.randn(2, 3, 4), torch.randn(2, 5, 2))}
"""


def test_import_einsum_of_three_and_four_operands_gives_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(MANY)
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    step = load_step(path, "step")
    with torch.no_grad():
        losses = step.module.double()(*[t.double() for t in step.inputs])
    for loss in report.losses:
        np.testing.assert_allclose(loss.value, losses[loss.name].item(), rtol=1e-9, err_msg=loss.name)
    same_as_torch(report, path, "step")


def test_import_einsum_contracts_each_pair_before_the_next_operand_joins(step_file):
    path, line_of = step_file("""
    class Chain(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(6, 6))

        def forward(self, x):
            return {"loss": torch.einsum("ab,bc,cd,de->ae", x, self.w, self.w, self.w).sum()}   # @chain


    def step():
        return {"module": Chain(), "inputs": (torch.randn(6, 6),)}
    """)
    [expr] = [line.expr for line in import_python(f"{path}:step").graph
              if line.source.line == line_of("chain") and line.targets != ("loss",)]
    # one sum over one letter per pair: no product of all five letters (6 ** 5 values here, n ** 5 in general)
    assert expr.count("sum(") == 3 and expr.count("axis=2") == 3, expr
