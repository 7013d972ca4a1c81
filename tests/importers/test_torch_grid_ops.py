"""meshgrid, diff, atanh, median and nanmean against PyTorch, in the training steps that use them (an
FCOS head's anchor centres, a forecaster's differenced loss, a squashed Gaussian's log-prob, a
robust loss, a loss over a target with NaN holes), values and gradients compared at their corners
(ties, NaN, +-1, infinities); and the refusals of `.item()` and torch.vmap, which say what to write."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from gradflow.errors import ModelError  # noqa: E402
from gradflow.importers import import_python  # noqa: E402
from tests.importers.conftest import check  # noqa: E402


def exprs(path: str) -> list:
    return [line.expr for line in import_python(f"{path}:step").graph]


def value(report, loss: str) -> float:
    return report.losses_by_name[loss].value


FCOS = """
class Head(nn.Module):
    stride = 8

    def __init__(self):
        super().__init__()
        self.tower = nn.Conv2d(4, 8, 3, padding=1)
        self.ltrb, self.centerness = nn.Conv2d(8, 4, 1), nn.Conv2d(8, 1, 1)
        self.row, self.col = nn.Parameter(torch.randn(3)), nn.Parameter(torch.randn(5))   # learned grid bias

    def forward(self, features, boxes):
        h = torch.relu(self.tower(features))                             # [B, 8, H=3, W=5]
        ys = torch.arange(3) * self.stride + self.stride // 2
        xs = torch.arange(5) * self.stride + self.stride // 2
        cy, cx = torch.meshgrid(ys, xs, indexing="ij")                   # integer centres, [3, 5]
        centres = torch.stack([cx, cy], -1).reshape(-1, 2).float()      # [15, 2]
        offsets = self.ltrb(h).exp().flatten(2).transpose(1, 2) * self.stride   # [B, 15, 4]
        pred = torch.cat([centres - offsets[..., :2], centres + offsets[..., 2:]], -1)
        bias_x, bias_y = torch.meshgrid(self.col, self.row, indexing="xy")  # [3, 5] each, summed back
        quality = self.centerness(h)[:, 0] + bias_x * bias_y
        gx, gy = torch.meshgrid(torch.linspace(-1, 1, 5), torch.linspace(-1, 1, 3), indexing="xy")
        target = torch.exp(-(gx ** 2 + gy ** 2))
        return {"box": (pred - boxes).abs().mean(),
                "quality": F.binary_cross_entropy_with_logits(quality, target.expand_as(quality))}


def step():
    torch.manual_seed(0)
    return {"module": Head(), "inputs": (torch.randn(2, 4, 3, 5), torch.rand(2, 15, 4) * 40)}
"""


def test_an_fcos_head_with_meshgrid_anchor_centres_imports_with_torch_gradients(step_file, same_as_torch):
    path, _ = step_file(FCOS)
    report = check(path, "step", same_as_torch)
    assert report.status("ltrb.weight", "box") == "flows" and report.status("row", "quality") == "flows"
    assert sum(e.startswith("broadcast_to(reshape(col, [1, 5]), (3, 5))") for e in exprs(path)) == 1


GRIDS = """
class Grids(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Parameter(torch.randn(4)), nn.Parameter(torch.randn(3)), nn.Parameter(torch.randn(2))
        self.s = nn.Parameter(torch.tensor(0.5))

    def forward(self, x):
        n = torch.arange(1.0, 25.0).sin()
        xy = torch.meshgrid(self.a, self.b, self.c, indexing="xy")       # [3, 4, 2]: the first two swapped
        ij = torch.meshgrid(self.a, self.b, self.c, indexing="ij")       # [4, 3, 2]
        old = torch.meshgrid(self.a, self.s)                              # no indexing: "ij"; a 0-d as one entry
        (alone,) = torch.meshgrid(self.b, indexing="xy")                 # one input: itself
        (point,) = torch.meshgrid(self.s, indexing="ij")                 # a 0-d alone: [1]
        return {"xy": sum((t * n.reshape(3, 4, 2)).sum() for t in xy),
                "ij": sum((t * n.reshape(4, 3, 2)).sum() for t in ij),
                "rest": (old[0] * n[:4, None]).sum() + (old[1] * n[4:8, None]).sum() + (alone * n[:3]).sum()
                        + point.sum() * 3.0}


def step():
    torch.manual_seed(0)
    return {"module": Grids(), "inputs": (torch.zeros(1),)}
"""


def test_meshgrid_in_both_indexings_and_of_one_or_a_0_d_input_matches_torch(step_file, same_as_torch):
    path, _ = step_file(GRIDS)
    report = check(path, "step", same_as_torch)
    shapes = {np.shape(v) for v in (report.grad("a", "xy"), report.grad("c", "ij"))}
    assert shapes == {(4,), (2,)}


FORECAST = """
class Forecaster(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Linear(4, 16)
        self.head = nn.Linear(16 * 3, 6)

    def forward(self, history, future):
        b = history.shape[0]
        patches = history.reshape(b, 3, 4)                               # PatchTST: 3 patches of 4
        pred = self.head(torch.relu(self.patch(patches)).reshape(b, -1))  # [B, 6]
        last = history[:, -1:]
        level = F.mse_loss(pred, future)
        moves = F.mse_loss(torch.diff(pred, prepend=last), torch.diff(future, prepend=last))
        bends = torch.diff(pred, n=2, dim=1, append=pred[:, :1]).pow(2).mean()
        steps = torch.diff(pred, dim=0).abs().mean()                      # along the batch
        return {"forecast": level + moves + 0.1 * bends + 0.01 * steps}


def step():
    torch.manual_seed(0)
    t = torch.linspace(0, 6, 18)
    series = torch.sin(t + torch.rand(5, 1) * 3) + 0.1 * torch.randn(5, 18)
    return {"module": Forecaster(), "inputs": (series[:, :12], series[:, 12:])}
"""


def test_a_forecasting_loss_on_differenced_predictions_imports_with_torch_gradients(step_file, same_as_torch):
    path, _ = step_file(FORECAST)
    report = check(path, "step", same_as_torch)
    assert report.status("patch.weight", "forecast") == "flows"
    assert any(e.startswith("concat([slice_") for e in exprs(path))   # the prepend joined first


DIFFS = """
class Diffs(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([[1.0, 4.0, 9.0, 16.0, 20.0], [0.5, -1.0, 2.0, 2.0, 0.0]]))

    def forward(self, mask, counts):
        n = torch.arange(1.0, 11.0)
        third = torch.diff(self.w, n=3, dim=-1, prepend=self.w[:, :2], append=self.w[:, 3:])   # [2, 6]
        none = torch.diff(self.w, n=0, prepend=self.w)                   # n=0: w alone, as torch
        flips = torch.diff(mask)                                          # booleans: where neighbours differ
        gaps = torch.diff(counts, prepend=torch.zeros(1, dtype=torch.long))  # integers stay integers
        rows = torch.diff(self.w, dim=0)
        return {"loss": (third * n[:6]).sum() + (none * n[:5]).sum() + (rows * n[:5]).sum()
                        + flips.float().sum() + (gaps * self.w[0]).sum()}


def step():
    return {"module": Diffs(), "inputs": (torch.tensor([True, True, False, True, False, False]),
                                          torch.tensor([0, 3, 3, 7, 8]))}
"""


def test_diff_n_times_with_prepend_and_append_of_booleans_and_integers_and_n_0_matches_torch(
        step_file, same_as_torch):
    path, _ = step_file(DIFFS)
    report = check(path, "step", same_as_torch)
    found = exprs(path)
    assert any(e.startswith("not_equal(mask[1:], mask[:-1])") for e in found)
    assert value(report, "loss") == pytest.approx(torch_loss(path), rel=1e-12)


def torch_loss(path: str) -> float:
    from gradflow.importers.torch.target import load_step
    step = load_step(path, "step")
    with torch.no_grad():
        return step.module.double()(*step.inputs)["loss"].item()


SQUASHED = """
from torch.distributions import Normal, TransformedDistribution
from torch.distributions.transforms import TanhTransform


class Actor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.mu, self.log_std = nn.Linear(3, 16), nn.Linear(16, 2), nn.Linear(16, 2)

    def forward(self, obs, actions):
        h = torch.relu(self.body(obs))
        std = self.log_std(h).clamp(-5, 2).exp()
        pi = TransformedDistribution(Normal(self.mu(h), std), [TanhTransform()])
        logp = pi.log_prob(actions).sum(-1)                              # atanh of the buffer's actions
        pre_tanh = torch.atanh(torch.tanh(self.mu(h)) * 0.999)
        return {"bc": -logp.mean(), "pre": pre_tanh.pow(2).mean()}


def step():
    torch.manual_seed(0)
    return {"module": Actor(), "inputs": (torch.randn(6, 3), torch.rand(6, 2) * 1.98 - 0.99)}
"""


def test_a_squashed_gaussian_log_prob_through_atanh_imports_with_torch_gradients(step_file, same_as_torch):
    path, _ = step_file(SQUASHED)
    report = check(path, "step", same_as_torch)
    assert report.status("log_std.weight", "bc") == "flows"
    assert "(log1p(actions) - log1p(-actions)) * 0.5" in exprs(path)


ATANH = """
class Edges(nn.Module):
    def __init__(self):
        super().__init__()
        self.tiny = nn.Parameter(torch.tensor([1e-10, -3e-200, 2e-8], dtype=torch.float64))
        self.inside = nn.Parameter(torch.tensor([0.0, -0.0, 0.5, -0.999999, 1 - 1e-12], dtype=torch.float64))
        self.edges = nn.Parameter(torch.tensor([1.0, -1.0, 2.0, -1.5]))

    def forward(self, x):
        scale = torch.tensor([1e-10, -3e-200, 2e-8], dtype=torch.float64)
        return {"tiny_ratio": (torch.atanh(self.tiny) / scale).sum(),   # 3 to the last digits
                "near": (torch.atanh(self.inside) * torch.arange(1.0, 6.0)).sum(),
                "edge": (torch.arctanh(self.edges) * torch.arange(1.0, 5.0)).sum()}


def step():
    return {"module": Edges(), "inputs": (torch.zeros(1),)}
"""


def test_atanh_matches_torch_near_0_at_plus_minus_1_and_beyond(step_file, same_as_torch):
    """Near 0 to the last digits (log1p, not the log of a ratio, which gives atanh(1e-10) 8e-8 off
    and atanh(3e-200) 0), +-inf at +-1 with an infinite gradient, NaN beyond with torch's finite
    gradient 1 / (1 - x ** 2)."""
    path, _ = step_file(ATANH)
    report = check(path, "step", same_as_torch)
    tiny = torch.tensor([1e-10, -3e-200, 2e-8], dtype=torch.float64)
    assert value(report, "tiny_ratio") == pytest.approx((torch.atanh(tiny) / tiny).sum().item(), rel=1e-15)
    assert value(report, "tiny_ratio") == pytest.approx(3.0, rel=1e-15)
    assert np.isnan(value(report, "edge"))
    grad = report.grad("edges", "edge").tolist()
    assert grad[:2] == [float("inf"), float("inf")]
    assert grad[2:] == pytest.approx([3 / (1 - 4.0), 4 / (1 - 2.25)], rel=1e-15)


ROBUST = """
class Robust(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 4))

    def forward(self, x, y):
        residual = (self.net(x) - y).abs()                                # [N, 4], outliers in y
        per_sample, where = torch.median(residual, dim=1)                # even count: the lower middle
        keep = torch.median(residual, 0, keepdim=True).values            # odd count
        scale = torch.median(residual.detach()) + 1e-3                    # MAD-style scale, no gradient
        return {"robust": (per_sample / scale).mean() + keep.mean() + where.float().mean() * 0.0,
                "whole": torch.median(residual)}


def step():
    torch.manual_seed(0)
    y = torch.randn(5, 4)
    y[1, 2], y[3, 0] = 40.0, -25.0
    return {"module": Robust(), "inputs": (torch.randn(5, 3), y)}
"""


def test_a_robust_loss_by_median_imports_with_torch_gradients(step_file, same_as_torch):
    path, _ = step_file(ROBUST)
    report = check(path, "step", same_as_torch)
    assert report.status("net.0.weight", "whole") == "flows"


MEDIANS = """
class Medians(nn.Module):
    def __init__(self):
        super().__init__()
        nan = float("nan")
        self.t = nn.Parameter(torch.tensor([[1.0, 3.0, 2.0], [3.0, 2.0, 0.0]]))      # middle 2, twice
        self.n = nn.Parameter(torch.tensor([[1.0, nan, 2.0, nan], [4.0, 0.0, 3.0, 1.0]]))
        self.lo = nn.Parameter(torch.tensor([-float("inf"), 0.0, -float("inf"), 5.0, -float("inf")]))
        self.hi = nn.Parameter(torch.tensor([float("inf"), 0.0, float("inf"), 5.0, float("inf")]))
        self.s = nn.Parameter(torch.tensor(1.5))

    def forward(self, counts):
        v, i = torch.median(self.n, 1)                                  # NaN: its first NaN, as torch
        k, j = torch.median(self.s, 0)                                    # a 0-d: itself, at 0
        return {"tied": torch.median(self.t) * 3.0,                       # shared by the two 2s, as torch
                "nan_all": torch.median(self.n) * 2.0,                   # NaN, shared by the NaNs
                "nan_rows": (v * torch.tensor([2.0, 3.0])).sum() + i.float().sum(),
                "low": torch.median(self.lo) * 2.0, "high": torch.median(self.hi) * 2.0,
                "scalar": torch.median(self.s) + k * 2.0 + j.float() + torch.median(counts).float()}


def step():
    return {"module": Medians(), "inputs": (torch.tensor([4, 1, 3, 3]),)}
"""


def test_median_of_ties_nan_and_infinities_matches_torch(step_file, same_as_torch):
    """torch.median(x) shares its gradient evenly among the entries equal to the middle (the NaNs
    where x holds one); torch.median(x, dim) gives a slice holding NaN its first NaN's index."""
    path, _ = step_file(MEDIANS)
    report = check(path, "step", same_as_torch)
    assert report.grad("t", "tied").tolist() == [[0.0, 0.0, 1.5], [0.0, 1.5, 0.0]]
    assert report.grad("n", "nan_all").tolist() == [[0.0, 1.0, 0.0, 1.0], [0.0] * 4]
    assert report.grad("lo", "low").tolist() == pytest.approx([2 / 3, 0.0, 2 / 3, 0.0, 2 / 3], rel=1e-15)
    assert value(report, "high") == float("inf") and value(report, "low") == float("-inf")
    assert np.isnan(value(report, "nan_rows"))
    assert report.grad("n", "nan_rows").tolist()[0] == [0.0, 2.0, 0.0, 0.0]


TIED = """
class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.t = nn.Parameter(torch.tensor([[1.0, 3.0, 1.0, 3.0, 2.0, 1.0, 3.0, 0.0] * 3,
                                            [3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 2.0, 2.0] * 3]))

    def forward(self, x):
        values, where = torch.median(self.t, 1)
        return {"loss": (values * torch.tensor([2.0, 5.0])).sum()}


def step():
    return {"module": Tied(), "inputs": (torch.zeros(1),)}
"""


def test_median_along_a_dim_takes_tied_entries_in_index_order_as_torch(step_file, same_as_torch):
    """Unlike kthvalue's, torch's median kernel breaks ties by index (on the CPU), as gradflow's
    stable order does: among 9 or 18 tied entries the same one is returned and takes the gradient."""
    path, _ = step_file(TIED)
    report = check(path, "step", same_as_torch)
    t = torch.tensor([[1.0, 3.0, 1.0, 3.0, 2.0, 1.0, 3.0, 0.0] * 3, [3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 2.0, 2.0] * 3],
                     dtype=torch.float64)
    assert torch.median(t, 1).indices.tolist() == [21, 5] != torch.kthvalue(t, 12, 1).indices.tolist()
    assert report.grad("t", "loss")[0, 21] == 2.0 and report.grad("t", "loss")[1, 5] == 5.0


HOLES = """
class Imputer(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 4))

    def forward(self, x, target):
        pred, seen = self.net(x), ~target.isnan()
        naive = torch.nanmean((pred - target).pow(2))                    # NaN in the holes
        filled = torch.where(seen, pred, target)                          # the target's own NaN in the holes
        error = (filled - target).pow(2)
        per_sensor = torch.nanmean(error, dim=0, keepdim=True)          # [1, 4]
        return {"naive": naive, "masked": torch.nanmean(error) + 0.1 * per_sensor.sum() + 0.01 * error.nanmean(1).mean()}


def step():
    torch.manual_seed(0)
    target = torch.randn(6, 4)
    target[0, 1] = target[2, 3] = target[2, 0] = target[5, 1] = float("nan")
    return {"module": Imputer(), "inputs": (torch.randn(6, 3), target)}
"""


def test_a_nanmean_over_a_target_with_nan_holes_imports_with_torch_gradients(step_file, same_as_torch):
    """nanmean gives a hole 0, but the backward of what made the hole's NaN multiplies that 0 by NaN:
    torch's gradient of the naive loss is NaN, and so is gradflow's, which reports it; the where
    that puts the target's NaN in the holes passes them nothing, as torch's."""
    path, _ = step_file(HOLES)
    report = check(path, "step", same_as_torch)
    assert np.isfinite(value(report, "naive")) and np.isnan(report.grad("net.0.weight", "naive")).any()
    assert report.pair("net.0.weight", "naive").nonfinite > 0
    assert np.isfinite(value(report, "masked")) and np.isfinite(report.grad("net.0.weight", "masked")).all()


ALL_NAN = """
class AllNan(nn.Module):
    def __init__(self):
        super().__init__()
        nan = float("nan")
        self.w = nn.Parameter(torch.tensor([[1.0, nan, 3.0], [nan, nan, nan], [2.0, 4.0, nan]]))

    def forward(self, x):
        rows = torch.nanmean(self.w, 1)
        return {"rows": (rows * torch.tensor([1.0, 2.0, 3.0])).sum(), "first": rows[0] * 2.0,
                "kept": torch.nanmean(self.w[:, :1], dim=(0, 1)), "whole": torch.nanmean(self.w)}


def step():
    return {"module": AllNan(), "inputs": (torch.zeros(1),)}
"""


def test_nanmean_of_an_all_nan_slice_is_nan_and_a_nan_entry_gets_0_as_torch(step_file, same_as_torch):
    """0 into a NaN entry; in an all-NaN slice the mean is 0 / 0, NaN, and so is torch's gradient
    into it (the mean's infinite 1 / 0 times the 0 of nansum's mask)."""
    path, _ = step_file(ALL_NAN)
    report = check(path, "step", same_as_torch)
    assert np.isnan(value(report, "rows"))
    np.testing.assert_array_equal(report.grad("w", "first"), [[1.0, 0.0, 1.0], [np.nan] * 3, [0.0] * 3])
    grad = report.grad("w", "rows")
    assert np.isnan(grad[1]).all() and grad[0].tolist() == [0.5, 0.0, 0.5]
    assert value(report, "whole") == pytest.approx(2.5, rel=1e-15)


REFUSED = """
class Refused(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x):
        if {form!r} == "item":
            pos = (x > 0).float()
            loss = (x * self.w).sum() / pos.sum().item()  # @item
        elif {form!r} == "vmap":
            loss = torch.vmap(lambda row: (row * self.w).sum())(x).sum()  # @vmap
        else:
            loss = torch.func.vmap(lambda row: row @ self.w)(x).sum()  # @func
        return {{"loss": loss}}


def step():
    return {{"module": Refused(), "inputs": (torch.randn(3, 4),)}}
"""

ITEM = ("`.item()` cannot be imported: it turns a tensor into a Python number, which the exported graph cannot "
        "follow; keep it a tensor instead (e.g. `pos.sum().clamp(min=1.0)` rather than `max(pos.sum().item(), "
        "1.0)`), and `.detach()` it if no gradient should pass")
VMAP = ("torch.vmap and torch.func transforms cannot be imported (export keeps them as calls such as "
        "'_add_batch_dim', which gradflow cannot follow): write the batch out instead, as a module that takes "
        "the whole batch or a loop over its examples joined with torch.stack")


@pytest.mark.parametrize("form, says", [("item", ITEM), ("vmap", VMAP), ("func", VMAP)])
def test_item_and_vmap_are_refused_at_their_line_saying_what_to_write_instead(step_file, form, says):
    path, line_of = step_file(REFUSED.format(form=form))
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:step")
    assert (caught.value.path, caught.value.line, caught.value.message) == (path, line_of(form), says)
