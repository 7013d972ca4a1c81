"""Losses with weights against PyTorch: class weights of cross_entropy and nll_loss, weight and
pos_weight of the binary cross entropies, cross_entropy against class probabilities, every
reduction; values and gradients compared."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import gradflow  # noqa: E402
import numpy as np  # noqa: E402
from tests.importers.conftest import check  # noqa: E402


CLASS_WEIGHTS = """
class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 5)
        self.register_buffer("w", torch.tensor([0.5, 2.0, 0.0, 1.5, 3.0]))   # class 2 counts for nothing

    def forward(self, x, y, tags, grid):
        logits = self.lin(x)                                    # [12, 5]
        seq = logits.reshape(4, 3, 5).transpose(1, 2)           # [4, 5, 3]: classes on axis 1
        img = logits.reshape(2, 3, 2, 5).permute(0, 3, 1, 2)    # [2, 5, 3, 2]
        w, logp = self.w, F.log_softmax(logits, 1)
        return {"averaged": F.cross_entropy(logits, y, weight=w) + F.nll_loss(logp, y, weight=w * 2),
                "ignored": F.cross_entropy(logits, y, weight=w, ignore_index=3)
                           + F.nll_loss(logp, y, weight=w, ignore_index=1, reduction="sum"),
                "unreduced": (F.cross_entropy(logits, y, weight=w, reduction="none") * torch.arange(12.0)).sum()
                             + F.nll_loss(logp, y, weight=w, reduction="none", ignore_index=4).square().sum(),
                "smooth": F.cross_entropy(logits, y, weight=w, label_smoothing=0.2)
                          + F.cross_entropy(logits, y, weight=w, label_smoothing=0.3, ignore_index=0, reduction="sum")
                          + (F.cross_entropy(logits, y, weight=w, label_smoothing=0.1, ignore_index=1,
                                             reduction="none") * torch.arange(12.0)).sum(),
                "seq": F.cross_entropy(seq, tags, weight=w, ignore_index=-1)
                       + F.cross_entropy(seq, tags, weight=w, ignore_index=-1, label_smoothing=0.25)
                       + (F.cross_entropy(seq, tags, weight=w, reduction="none", ignore_index=-1) ** 2).sum()
                       + F.nll_loss(F.log_softmax(seq, 1), tags, weight=w, ignore_index=-1, reduction="sum"),
                "grid": F.cross_entropy(img, grid, weight=w) + F.nll_loss(F.log_softmax(img, 1), grid, weight=w)
                        + (F.cross_entropy(img, grid, weight=w, reduction="none", label_smoothing=0.1)
                           * torch.arange(12.0).reshape(2, 3, 2)).sum()}


def step():
    torch.manual_seed(0)
    return {"module": Tagger(), "inputs": (torch.randn(12, 4), torch.tensor([0, 1, 2, 3, 4, 2, 1, 1, 3, 0, 4, 2]),
                                           torch.tensor([[1, -1, 4], [0, 2, -1], [3, 3, 1], [2, 4, 0]]),
                                           torch.tensor([[[1, 2], [0, 4], [2, 3]], [[3, 1], [2, 2], [4, 0]]]))}
"""


def test_import_cross_entropy_and_nll_with_class_weights_give_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(CLASS_WEIGHTS)
    check(path, "step", same_as_torch)


CORNERS = """
class Corners(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.head = nn.Linear(4, 3)

    def forward(self, x, y):
        w = torch.tensor([0.0, 2.0, 0.0], dtype=x.dtype)
        logits = self.lin(x)
        return {"all_ignored": F.cross_entropy(logits, torch.full((4,), -100), weight=w),   # @ignored
                "ignored_smooth": F.cross_entropy(logits, torch.full((4,), 1), weight=w, ignore_index=1,
                                                  label_smoothing=0.2),
                "ignored_summed": F.cross_entropy(logits, torch.full((4,), 1), weight=w, ignore_index=1,
                                                  reduction="sum", label_smoothing=0.2),
                "zero_weights_summed": F.cross_entropy(logits, y, weight=w, reduction="sum")
                                       + F.nll_loss(F.log_softmax(logits, 1), y, weight=w, reduction="none").sum(),
                "zero_weights_smooth": F.cross_entropy(self.head(x), y, weight=w, reduction="sum", label_smoothing=0.3),
                "zero_total": F.cross_entropy(self.head(x), y, weight=w, ignore_index=1)}   # @total


def step():
    torch.manual_seed(0)
    return {"module": Corners(), "inputs": (torch.randn(4, 4), torch.tensor([0, 2, 2, 0]))}
"""


def test_import_cross_entropy_with_every_label_ignored_or_weighted_zero_gives_torch_nan_and_zeros(
        step_file, same_as_torch):
    path, line_of = step_file(CORNERS)
    report = check(path, "step", same_as_torch)
    value = {loss.name: loss.value for loss in report.losses}
    # every row ignored: the mean is 0 / 0 with no gradient; labels whose weights are all zero:
    # the mean is 0 / 0 too, and torch's gradient is nan where gradflow's must be
    assert np.isnan(value["all_ignored"]) and np.isnan(value["ignored_smooth"]) and np.isnan(value["zero_total"])
    assert value["ignored_summed"] == 0 and value["zero_weights_summed"] == 0 and value["zero_weights_smooth"] > 0
    assert report.status("lin.weight", "all_ignored") == "zero"
    assert report.status("lin.weight", "zero_weights_summed") == "zero"
    assert np.isnan(report.grad("head.weight", "zero_total")).all()
    errors = {(f.rule, f.line) for f in report.findings if f.severity == "error"}
    assert ("GF105", line_of("ignored")) in errors and ("GF105", line_of("total")) in errors


BINARY = """
class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.soft = nn.Parameter(torch.randn(6, 3))
        self.register_buffer("per_class", torch.tensor([0.5, 0.0, 2.0]))
        self.register_buffer("per_row", torch.rand(6, 1))
        self.register_buffer("pos", torch.tensor([3.0, 0.5, 1.0]))

    def forward(self, x, y):
        h = self.lin(x)                              # [6, 3]
        p, t = torch.sigmoid(h), torch.sigmoid(self.soft)    # t: a target that takes gradient, as in torch
        w, rows, pos, n = self.per_class, self.per_row, self.pos, torch.arange(18.0).reshape(6, 3)
        cube, cube_y = h.reshape(2, 3, 3), y.reshape(2, 3, 3)
        return {"probs": F.binary_cross_entropy(p, y, weight=w) + F.binary_cross_entropy(p, y, weight=rows)
                         + F.binary_cross_entropy(p, y, reduction="sum")
                         + F.binary_cross_entropy(p, y, weight=rows * 3, reduction="sum")
                         + (F.binary_cross_entropy(p, t, reduction="none") * n).sum()
                         + (F.binary_cross_entropy(p, t, weight=w, reduction="none") * n).sum(),
                "logits": F.binary_cross_entropy_with_logits(h, y, weight=w)
                          + F.binary_cross_entropy_with_logits(h, t, pos_weight=pos)
                          + F.binary_cross_entropy_with_logits(h, y, weight=rows, pos_weight=pos, reduction="sum")
                          + (F.binary_cross_entropy_with_logits(h, t, weight=w, reduction="none") * n).sum()
                          + (F.binary_cross_entropy_with_logits(h, y, pos_weight=rows, reduction="none") * n).sum()
                          + F.binary_cross_entropy_with_logits(cube, cube_y, pos_weight=pos)
                          + F.binary_cross_entropy_with_logits(cube, cube_y, weight=w[:, None], pos_weight=pos[:, None],
                                                               reduction="sum"),
                "saturated": F.binary_cross_entropy_with_logits(50 + h.abs(), torch.ones_like(h), weight=w,
                                                                pos_weight=pos),
                "tails": F.binary_cross_entropy(torch.sigmoid(h - 32), y, reduction="sum")
                         + F.binary_cross_entropy(torch.sigmoid(h - 30), y)     # p(1 - p) below 1e-12
                         + F.binary_cross_entropy(torch.sigmoid(h - 31), y, weight=rows)
                         + (F.binary_cross_entropy(torch.sigmoid(h - 32), y, reduction="none") * n).sum(),
                "edges": F.binary_cross_entropy(torch.tensor([[1.0, 0.0, 0.5]], dtype=x.dtype).expand(6, 3), y,
                                                reduction="none").sum() + F.binary_cross_entropy(p, y, weight=rows)}


def step():
    torch.manual_seed(0)
    return {"module": Tagger(), "inputs": (torch.randn(6, 4), torch.tensor([0.0, 1.0, 0.3]).repeat(6, 1))}
"""


def test_import_binary_cross_entropies_with_weight_pos_weight_and_reductions_give_torch_values_and_gradients(
        step_file, same_as_torch):
    path, _ = step_file(BINARY)
    report = check(path, "step", same_as_torch)
    # every logit so large that sigmoid is 1 and every label 1: torch's gradient is exactly 0
    assert report.status("lin.weight", "saturated") == "zero"
    # p of 1 and 0 against labels 0 and 1: torch clamps the logs at -100, 100 each, a finite loss
    assert report.losses[-1].name == "edges" and report.losses[-1].value > 1200
    assert not [f for f in report.findings if f.rule == "GF105"]


@pytest.mark.parametrize("code", [
    "F.cross_entropy(h, y, weight=self.w.softmax(0))",
    "F.nll_loss(F.log_softmax(h, 1), y, weight=self.w, reduction='sum')",
    "F.binary_cross_entropy(torch.sigmoid(h), torch.ones_like(h), weight=self.w)",
    "F.binary_cross_entropy_with_logits(h, torch.ones_like(h), pos_weight=self.w * 2)",
])
def test_import_a_loss_weight_that_takes_gradient_is_an_error_at_its_line_as_in_torch(step_file, code):
    path, line_of = step_file(f"""
    class Learned(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)
            self.w = nn.Parameter(torch.ones(3))

        def forward(self, x, y):
            h = self.lin(x)
            return {{"loss": {code}}}   # @loss


    def step():
        return {{"module": Learned(), "inputs": (torch.randn(5, 4), torch.tensor([0, 1, 2, 1, 0]))}}
    """)
    # torch has no gradient for a loss's weight and refuses one that requires it: so does the import
    with pytest.raises(gradflow.ModelError) as e:
        gradflow.load(f"{path}:step")
    assert str(e.value).startswith(f"{path}:{line_of('loss')}:"), str(e.value)
    assert "not differentiable with respect to argument" in str(e.value) and "weight" in str(e.value)


SOFT_TARGETS = """
class Student(nn.Module):
    def __init__(self):
        super().__init__()
        self.student, self.teacher = nn.Linear(4, 5), nn.Linear(4, 5)
        self.register_buffer("w", torch.tensor([0.5, 2.0, 0.0, 1.5, 3.0]))

    def forward(self, x, mix):
        logits, soft = self.student(x), self.teacher(x).softmax(1)   # soft: takes gradient, as in torch
        img = logits.reshape(2, 3, 5).transpose(1, 2)                  # [2, 5, 3]: the class axis second
        img_soft = mix.reshape(2, 3, 5).transpose(1, 2)
        return {"distill": F.cross_entropy(logits, soft) + F.cross_entropy(logits, soft.detach(), reduction="sum"),
                "mixup": F.cross_entropy(logits, mix, weight=self.w, label_smoothing=0.2)
                         + (F.cross_entropy(logits, mix, weight=self.w, reduction="none") * torch.arange(6.0)).sum()
                         + F.cross_entropy(img, img_soft, weight=self.w)
                         + F.cross_entropy(img, img_soft, label_smoothing=0.1, reduction="none").sum()}


def step():
    torch.manual_seed(0)
    mix = 0.7 * F.one_hot(torch.tensor([0, 1, 2, 3, 4, 1]), 5) + 0.3 * F.one_hot(torch.tensor([1, 1, 0, 2, 3, 4]), 5)
    return {"module": Student(), "inputs": (torch.randn(6, 4), mix.double())}
"""


def test_import_cross_entropy_against_class_probabilities_gives_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(SOFT_TARGETS)
    report = check(path, "step", same_as_torch)
    # the teacher learns from the distillation loss through its softmax, unless detached
    assert report.status("teacher.weight", "distill") == "flows"
