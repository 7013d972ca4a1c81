"""Scans, sorts and scatters against PyTorch: discounted returns, NeRF's transmittance, ListMLE,
cummax and cummin, sort, argsort, topk, kthvalue and msort, a mixture-of-experts router, message
passing with index_add_, scatter and scatter_reduce, gumbel_softmax(hard=True), erf and erfc; values
and gradients compared at ties, zeros, -inf and repeated indices, and the tie orders that differ."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import gradflow  # noqa: E402
from gradflow.errors import ModelError  # noqa: E402
from gradflow.importers import import_python  # noqa: E402
from tests.importers.conftest import check  # noqa: E402


def exprs(path: str) -> list:
    return [line.expr for line in import_python(f"{path}:step").graph]


RETURNS = """
class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.pi, self.v = nn.Linear(4, 8), nn.Linear(8, 3), nn.Linear(8, 1)
        self.pos = nn.Embedding(6, 8)

    def forward(self, obs, actions, rewards, mask):
        gamma = 0.9
        h = torch.tanh(self.body(obs))                                    # [T, 8], T = 6
        powers = gamma ** torch.arange(6.0)
        returns = torch.flip(torch.cumsum(torch.flip(rewards * powers, [0]), 0), [0]) / powers
        value = self.v(h).squeeze(-1)
        advantage = returns - value
        logp = torch.log_softmax(self.pi(h), -1).gather(1, actions[:, None]).squeeze(1)
        position = mask.long().cumsum(-1)                                  # position ids from a mask
        seen = self.pos(position).sum(-1) * mask
        running = torch.cumsum(value, 0, dtype=torch.float64) + torch.cumsum(mask, 0)   # a bool count
        return {"policy": -(logp * advantage.detach()).mean(),
                "value": advantage.pow(2).mean(),
                "positions": (seen * torch.arange(6.0)).sum() + running.sum()}


def step():
    torch.manual_seed(0)
    return {"module": ActorCritic(),
            "inputs": (torch.randn(6, 4), torch.tensor([0, 2, 1, 1, 0, 2]), torch.randn(6),
                       torch.tensor([False, True, True, False, True, True]))}
"""


def test_discounted_returns_by_flip_and_cumsum_and_positions_from_a_mask_import(step_file, same_as_torch):
    path, _ = step_file(RETURNS)
    report = check(path, "step", same_as_torch)
    assert report.status("v.weight", "policy") == "blocked"   # the advantage is detached
    assert any(e.startswith("cumsum(to_int(") for e in exprs(path))   # the bool mask counted as integers


NERF = """
class Render(nn.Module):
    def __init__(self):
        super().__init__()
        self.density, self.color = nn.Linear(3, 1), nn.Linear(3, 3)
        # exact zeros: a factor of 0 first, twice, last, and none
        self.p = nn.Parameter(torch.tensor([[2.0, 0.0, 3.0, 0.0, 5.0], [0.0, 0.0, 1.0, 2.0, 3.0],
                                            [1.0, 2.0, 3.0, 4.0, 0.0], [1.5, -2.0, 0.5, 3.0, 2.0]]))

    def forward(self, points, target, deltas):
        sigma = F.relu(self.density(points)).squeeze(-1)               # [rays, samples]
        alpha = 1.0 - torch.exp(-sigma * deltas)
        ones = torch.ones(alpha.shape[0], 1)
        transmittance = torch.cumprod(torch.cat([ones, 1.0 - alpha + 1e-10], -1), -1)[:, :-1]
        weights = alpha * transmittance
        rgb = (weights[..., None] * torch.sigmoid(self.color(points))).sum(1)
        depth = torch.exp(-torch.cumsum(sigma * deltas, -1))            # the same by a sum
        return {"render": F.mse_loss(rgb, target) + (weights * depth).mean(),
                "zeros": (torch.cumprod(self.p, 1) * torch.arange(1.0, 21.0).reshape(4, 5)).sum(),
                "zeros_down": (torch.cumprod(self.p, 0) * torch.arange(20.0).reshape(4, 5)).sum()}


def step():
    torch.manual_seed(0)
    return {"module": Render(), "inputs": (torch.randn(4, 8, 3), torch.rand(4, 3), torch.rand(4, 8) * 0.5)}
"""


def test_nerf_transmittance_by_cumprod_imports_with_torch_gradients_at_exact_zeros(step_file, same_as_torch):
    path, _ = step_file(NERF)
    report = check(path, "step", same_as_torch)
    grad = report.grad("p", "zeros")
    assert grad[0, 1] != 0 and (grad[0, 2:] == 0).all()   # the first zero takes the products beyond it
    assert (grad[1, 1:] == 0).all() and grad[3].all()


LISTMLE = """
class Ranker(nn.Module):
    def __init__(self):
        super().__init__()
        self.score = nn.Linear(4, 1)
        self.s = nn.Parameter(torch.tensor([[0.5, -1.0, 2.0, 0.0], [1.0, 1.0, -3.0, 4.0]]))

    def forward(self, docs, relevance, keep):
        scores = self.score(docs).squeeze(-1)                          # [queries, docs]
        order = relevance.argsort(dim=-1, descending=True)
        ranked = scores.gather(1, order)
        tail = torch.logcumsumexp(ranked.flip(-1), -1).flip(-1)        # ListMLE
        masked = self.s.masked_fill(~keep, float("-inf"))              # -inf first, inside, and a row's end
        return {"listmle": (tail - ranked).sum(-1).mean(),
                "masked": (torch.logcumsumexp(masked, 1) * torch.tensor([1.0, -2.0, 3.0, 0.5])).nan_to_num().sum(),
                "axis0": torch.logcumsumexp(self.s, 0).sum()}


def step():
    torch.manual_seed(0)
    return {"module": Ranker(),
            "inputs": (torch.randn(3, 5, 4), torch.rand(3, 5),
                       torch.tensor([[False, True, False, True], [True, True, True, False]]))}
"""


def test_listmle_and_a_masked_logcumsumexp_import_with_torch_gradients_at_minus_inf(step_file, same_as_torch):
    path, _ = step_file(LISTMLE)
    report = check(path, "step", same_as_torch)
    # the masked entries get no gradient, NaN (torch's, where the result is -inf) stopping at the mask
    assert np.isfinite(report.grad("s", "masked")).all() and report.grad("s", "masked")[0, 0] == 0


RUNNING = """
class Drawdown(nn.Module):
    def __init__(self):
        super().__init__()
        self.policy = nn.Linear(3, 1)
        # ties: a later equal entry takes the running maximum (and its gradient) over
        self.t = nn.Parameter(torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0], [2.0, 2.0, 1.0, 1.0, 0.0]]))

    def forward(self, market):
        wealth = torch.cumsum(self.policy(market).squeeze(-1), -1)      # [batch, time]
        peak = torch.cummax(wealth, -1).values
        worst, at = torch.cummin(wealth, 0)
        tied, where = torch.cummax(self.t, 1)
        low = torch.cummin(self.t, 1)
        return {"drawdown": (peak - wealth).max(-1).values.mean() - worst.mean() + at.float().sum(),
                "ties": (tied * torch.arange(1.0, 11.0).reshape(2, 5)).sum() + where.float().sum()
                        + (low.values * torch.arange(10.0).reshape(2, 5)).sum() + low.indices.sum()}


def step():
    torch.manual_seed(0)
    return {"module": Drawdown(), "inputs": (torch.randn(4, 7, 3),)}
"""


def test_cummax_and_cummin_give_the_gradient_to_the_index_they_return_as_torch(step_file, same_as_torch):
    path, _ = step_file(RUNNING)
    report = check(path, "step", same_as_torch)
    # cummax's 3s: the second takes over the first, and keeps its place against the 2; cummin's 1 all
    assert report.grad("t", "ties")[0].tolist() == [1.0 + 10.0, 2.0, 3.0 + 4.0, 0.0, 5.0]


SORTS = """
class Sorts(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 6)
        # ties within 16 entries, where torch's unstable sort keeps index order too
        self.t = nn.Parameter(torch.tensor([[2.0, 1.0, 2.0, 0.0, 1.0, 2.0], [3.0, 3.0, 3.0, 3.0, -1.0, 0.5]]))

    def forward(self, x, targets):
        h = self.lin(x)                                                  # [5, 6]
        n = torch.arange(30.0).reshape(5, 6).sin()
        up, where = torch.sort(h, dim=1)
        down = torch.sort(h, 0, descending=True)
        per_example = F.cross_entropy(h, targets, reduction="none")
        tied = torch.sort(self.t, -1, descending=True)
        stable = torch.sort(self.t.repeat(1, 4), dim=-1, stable=True)  # 24 entries, stable
        k_up, k_at = torch.kthvalue(h, 2, 1)
        k_keep = torch.kthvalue(h, 5, 0, keepdim=True)
        return {"sorted": (up * n).sum() + (down.values * n).sum() + (where + down.indices).float().sum()
                          + (torch.msort(h) * n).sum() + (torch.argsort(h, 1) * h).sum()
                          + (torch.argsort(h, dim=0, descending=True, stable=True) * h).sum(),
                "trimmed": h.sort(dim=1).values[:, 1:-1].mean(),
                "hard": per_example.topk(2).values.mean() + (h.topk(3, dim=0, largest=False).values * n[:3]).sum()
                        + h.topk(6).values[:, 0].sum() + torch.topk(h[0], 1).indices.float().sum()
                        + (h.topk(4, sorted=False).values * h.topk(4, sorted=False).values).sum(),
                "kth": (k_up * torch.arange(5.0)).sum() + k_at.sum() + (k_keep.values * n[0]).sum()
                       + k_keep.indices.float().sum(),
                "ties": (tied.values * torch.arange(12.0).reshape(2, 6)).sum() + tied.indices.sum(),
                "stable": (stable.values * torch.arange(48.0).reshape(2, 24)).sum() + stable.indices.sum()}


def step():
    torch.manual_seed(0)
    return {"module": Sorts(), "inputs": (torch.randn(5, 3), torch.tensor([0, 5, 2, 2, 1]))}
"""


def test_sort_argsort_topk_kthvalue_and_msort_give_the_gradient_to_the_index_they_return(step_file, same_as_torch):
    path, _ = step_file(SORTS)
    report = check(path, "step", same_as_torch)
    assert report.status("lin.weight", "sorted") == "flows"
    # a descending sort of ties: the first of them first, each taking the gradient of its place
    assert report.grad("t", "ties")[0].tolist() == [0.0, 3.0, 1.0, 5.0, 4.0, 2.0]


SCALAR = """
class Scalar(nn.Module):
    def __init__(self):
        super().__init__()
        self.s = nn.Parameter(torch.tensor(0.5))

    def forward(self, x):
        s, flag = self.s, x > 0
        running, at = torch.cummax(s, 0)
        low = torch.cummin(s, -1)
        up, where = torch.sort(s)
        top, k_at = torch.topk(s, 1)
        kth = torch.kthvalue(s, 1, 0)
        picked = (at + where + k_at + kth.indices + low.indices + torch.argsort(s)).float()
        return {"loss": torch.cumsum(s, 0) * 2 + torch.cumprod(s, 0) * 3 + torch.logcumsumexp(s, 0) * 4
                        + running * 5 + low.values * 6 + up * 7 + top * 8 + kth.values * 9 + torch.msort(s) * 10
                        + picked + torch.cumsum(flag, 0) * s}


def step():
    return {"module": Scalar(), "inputs": (torch.tensor(1.0),)}
"""


def test_scans_and_sorts_of_a_0_d_tensor_are_the_tensor_itself_at_index_0(step_file, same_as_torch):
    path, _ = step_file(SCALAR)
    report = check(path, "step", same_as_torch)
    assert report.grad("s", "loss") == pytest.approx(2 + 3 + 4 + 5 + 6 + 7 + 8 + 9 + 10 + 1, rel=1e-12)


TIED = """
class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.t = nn.Parameter(torch.tensor([1.0, 3.0, 1.0, 3.0, 2.0, 1.0, 3.0, 0.0] * 3))

    def forward(self, x):
        n = torch.arange(1.0, 25.0)
        return {"topk": (torch.topk(self.t, 3).values * n[:3]).sum(),
                "smallest": (torch.topk(self.t, 5, largest=False).values * n[:5]).sum(),
                "kth": torch.kthvalue(self.t, 12).values * 3.0,
                "sort": (torch.sort(self.t).values * n).sum(),
                "unsorted": torch.topk(self.t, 5, sorted=False).values.sum() * 2.0}


def step():
    return {"module": Tied(), "inputs": (torch.zeros(1),)}
"""


def test_ties_beyond_torchs_stable_orders_keep_torchs_values_and_each_group_of_ties_its_gradient(
        step_file, same_as_torch):
    """topk, kthvalue and a sort of more than 16 entries without stable=True order tied entries as
    torch's algorithms happen to: the values and each tied group's total gradient are torch's, but
    gradflow gives it to the tied entries in index order, where torch spreads it otherwise."""
    path, _ = step_file(TIED)
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    t = torch.tensor([1.0, 3.0, 1.0, 3.0, 2.0, 1.0, 3.0, 0.0] * 3, dtype=torch.float64, requires_grad=True)
    n = torch.arange(1.0, 25.0, dtype=torch.float64)
    theirs = {"topk": (torch.topk(t, 3).values * n[:3]).sum(),
              "smallest": (torch.topk(t, 5, largest=False).values * n[:5]).sum(),
              "kth": torch.kthvalue(t, 12).values * 3.0, "sort": (torch.sort(t).values * n).sum(),
              "unsorted": torch.topk(t, 5, sorted=False).values.sum() * 2.0}
    values = {loss.name: loss.value for loss in report.losses}
    differ = set()
    for name, loss in theirs.items():
        (grad,) = torch.autograd.grad(loss, t)
        ours = report.grad("t", name)
        assert values[name] == pytest.approx(loss.item(), rel=1e-12)
        for value in (0.0, 1.0, 2.0, 3.0):   # each group of tied entries: torch's total
            group = t.detach().numpy() == value
            assert ours[group].sum() == pytest.approx(grad.numpy()[group].sum(), rel=1e-12)
        if not np.array_equal(ours, grad.numpy()):
            differ.add(name)
    assert differ == set(theirs)
    assert report.grad("t", "topk").tolist()[:7] == [0, 1, 0, 2, 0, 0, 3]   # index order among the 3s


MOE = """
class Experts(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(4, 4)
        self.experts = nn.ModuleList([nn.Linear(4, 4) for _ in range(4)])

    def forward(self, x):
        probs = torch.softmax(self.gate(x), -1)                         # [tokens, experts]
        top, chosen = probs.topk(2, dim=-1)
        top = top / top.sum(-1, keepdim=True)
        weights = torch.zeros_like(probs).scatter(-1, chosen, top)
        outs = torch.stack([e(x) for e in self.experts], 1)             # [tokens, experts, 4]
        y = (weights[..., None] * outs).sum(1)
        load = torch.zeros(4).scatter_add(0, chosen.reshape(-1), torch.ones(chosen.numel())) / chosen.numel()
        routed = torch.zeros_like(probs).scatter_(1, chosen, 1.0)
        balance = 4 * (load * probs.mean(0)).sum() + (routed * probs).mean()
        return {"task": y.pow(2).mean(), "balance": balance}


def step():
    torch.manual_seed(0)
    return {"module": Experts(), "inputs": (torch.randn(10, 4),)}
"""


def test_a_mixture_of_experts_top_k_router_with_scatter_imports(step_file, same_as_torch):
    path, _ = step_file(MOE)
    report = check(path, "step", same_as_torch)
    assert report.status("gate.weight", "task") == "flows" and report.status("experts.0.weight", "balance") == \
        "unreachable"


GNN = """
class MessagePassing(nn.Module):
    def __init__(self):
        super().__init__()
        self.message, self.update = nn.Linear(4, 4), nn.Linear(8, 4)

    def forward(self, h, edges):
        source, target = edges                                          # repeated targets: messages add up
        m = self.message(h)[source]
        total = torch.zeros_like(h).index_add_(0, target, m)
        degree = torch.zeros(h.shape[0]).index_add(0, target, torch.ones(target.shape[0]), alpha=2.0)
        mean = total / degree.clamp(min=1.0)[:, None]
        counts = torch.zeros(h.shape[0], 4).scatter_add_(0, target[:, None].expand(-1, 4), m)
        pooled = torch.zeros(h.shape[0], 4).scatter_reduce(0, target[:, None].expand(-1, 4), m, "mean")
        fresh = h.scatter_reduce(0, target[:, None].expand(-1, 4), m, "mean", include_self=False)
        summed = h.scatter_reduce(0, target[:, None].expand(-1, 4), m, "sum", include_self=False)
        out = self.update(torch.cat([h, mean], -1))
        return {"loss": out.pow(2).mean() + (counts - pooled).pow(2).mean() + (fresh * summed).mean()}


def step():
    torch.manual_seed(0)
    edges = torch.tensor([[0, 1, 2, 3, 4, 0, 2], [1, 2, 1, 1, 0, 3, 3]])
    return {"module": MessagePassing(), "inputs": (torch.randn(6, 4), edges)}
"""


def test_message_passing_with_index_add_scatter_add_and_scatter_reduce_imports(step_file, same_as_torch):
    path, _ = step_file(GNN)
    check(path, "step", same_as_torch)
    assert sum(e.startswith("scatter_add(") for e in exprs(path)) >= 3


SCATTERS = """
class Writes(nn.Module):
    def __init__(self):
        super().__init__()
        self.x = nn.Parameter(torch.arange(12.0).reshape(3, 4))
        self.src = nn.Parameter(torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))

    def forward(self, index, wide):
        n = torch.arange(1.0, 13.0).reshape(3, 4)
        written = self.x.scatter(1, index, self.src)                    # repeated indices: the last is written
        added = self.x.scatter_add(1, index, self.src) + self.x.scatter(1, index, wide)   # only wide[:2, :3] read
        filled = self.x.scatter(0, index[:1], -2.0)
        return {"written": (written * n).sum(), "added": (added * n).sum(), "filled": (filled * n).sum()}


def step():
    torch.manual_seed(0)
    return {"module": Writes(), "inputs": (torch.tensor([[1, 1, 1], [2, 0, 2]]), torch.randn(3, 5))}
"""


def test_scatter_writes_the_last_of_repeated_indices_as_torch_on_cpu(step_file, same_as_torch):
    path, _ = step_file(SCATTERS)
    report = check(path, "step", same_as_torch)
    # every write gets its place's gradient, the overwritten ones too (torch's rule)
    assert report.grad("src", "written").tolist() == [[2.0, 2.0, 2.0], [7.0, 5.0, 7.0]]


ADDED = """
class Counts(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.arange(12.0).reshape(3, 4))

    def forward(self, index):
        ones = torch.ones(3, 4)
        # reduce="add" has no derivative in torch: what it adds up here is data
        counts = torch.zeros(3, 4).scatter(1, index, ones, reduce="add")
        filled = ones.scatter(0, index[1:], 2.5, reduce="add")
        return {"loss": (self.w * counts).sum() + (self.w * filled).sum()}


def step():
    return {"module": Counts(), "inputs": (torch.tensor([[1, 1, 3], [2, 0, 2], [0, 0, 0]]),)}
"""


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")   # torch's, for a tensor src
def test_scatter_with_reduce_add_adds_as_scatter_add(step_file, same_as_torch):
    path, _ = step_file(ADDED)
    report = check(path, "step", same_as_torch)
    assert report.grad("w", "loss").tolist() == [[3.5, 8.0, 3.5, 2.0], [2.0, 1.0, 3.0, 1.0], [6.5, 1.0, 3.5, 1.0]]
    assert sum(e.startswith("scatter_add(") for e in exprs(path)) == 2


GUMBEL = """
class Discrete(nn.Module):
    def __init__(self):
        super().__init__()
        self.logits, self.decode = nn.Linear(4, 5), nn.Linear(5, 4)

    def forward(self, x):
        code = F.gumbel_softmax(self.logits(x), tau=0.5, hard=True)    # one-hot forward, soft backward
        return {"recon": (self.decode(code) - x).pow(2).mean()}


def step():
    torch.manual_seed(0)
    return {"module": Discrete(), "inputs": (torch.randn(6, 4),)}
"""


@contextlib.contextmanager
def gumbel_noise(noise):
    """Tensor.exponential_ fills with e ** -noise: gumbel_softmax's noise, -log of that draw, is then
    ``noise`` (the importer's draw, made at import), not torch's next numbers."""
    real = torch.Tensor.exponential_

    def give(self, *args, **kwargs):
        return self.copy_(torch.from_numpy(np.exp(-noise)))
    torch.Tensor.exponential_ = give
    try:
        yield
    finally:
        torch.Tensor.exponential_ = real


def test_gumbel_softmax_hard_imports_with_its_noise_drawn_at_import(step_file, same_as_torch):
    path, _ = step_file(GUMBEL)
    (noise,) = [v for k, v in import_python(f"{path}:step").arrays.items() if k.startswith("neg")]
    assert noise.shape == (6, 5) and noise.std() > 0.5
    with gumbel_noise(noise):
        report = check(path, "step", same_as_torch)
    assert report.status("logits.weight", "recon") == "flows"   # straight through the one-hot
    assert any(e.startswith("scatter(") for e in exprs(path))


ERF = """
class Probit(nn.Module):
    def __init__(self):
        super().__init__()
        self.mu, self.log_sigma = nn.Linear(3, 1), nn.Parameter(torch.zeros(1))
        self.z = nn.Parameter(torch.tensor([-30.0, -6.0, -1.0, 0.0, 1e-8, 2.0, 6.0, 26.0, 30.0]))

    def forward(self, x, y):
        z = (y - self.mu(x).squeeze(-1)) / (self.log_sigma.exp() * 2 ** 0.5)
        cdf = 0.5 * (1 + torch.erf(z))
        tail = 0.5 * torch.special.erfc(z)
        return {"probit": -torch.log(cdf.clamp(min=1e-12)).mean() - torch.log(tail.clamp(min=1e-12)).mean(),
                "tails": (torch.erf(self.z) * torch.arange(9.0)).sum() + (torch.erfc(self.z) * 1e300).sum()
                         + torch.special.erf(self.z).sum()}


def step():
    torch.manual_seed(0)
    return {"module": Probit(), "inputs": (torch.randn(8, 3), torch.randn(8))}
"""


def test_erf_and_erfc_import_with_torch_values_and_gradients_in_their_tails(step_file, same_as_torch):
    path, _ = step_file(ERF)
    check(path, "step", same_as_torch)


REFUSED = """
class Refused(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 4))

    def forward(self, index):
        if {form!r} == "mean":   # of integers: torch rounds the mean down
            out = self.w + torch.zeros(3, 4, dtype=torch.long).scatter_reduce(1, index, index, "mean")  # @mean
        elif {form!r} == "multiply":
            out = self.w.scatter(1, index, self.w[:, :2], reduce="multiply")  # @multiply
        else:
            out = torch.special.i0(self.w)  # @i0
        return {{"loss": out.sum()}}


def step():
    return {{"module": Refused(), "inputs": (torch.tensor([[0, 1], [1, 1], [3, 2]]),)}}
"""


@pytest.mark.parametrize("form, says", [
    ("mean", "unsupported op aten.scatter_reduce.two with reduce=\"mean\" of an integer tensor (torch rounds it down)"),
    ("multiply", "unsupported op aten.scatter.reduce with reduce='multiply'"),
    ("i0", "unsupported op aten.special_i0.default: gradflow has no equivalent"),
])
def test_an_integer_mean_scatter_reduce_a_multiplying_scatter_and_a_bessel_function_are_refused_at_their_line(
        step_file, form, says):
    path, line_of = step_file(REFUSED.format(form=form))
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:step")
    assert caught.value.line == line_of(form) and caught.value.message.startswith(says)


NAMED_BY_THE_USERS_CALL = """
class Call(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(5, 3))

    def forward(self, index):
        if {form!r} == "index_add":
            out = torch.zeros(4, 3).index_add(0, index, self.w)  # @index_add
        elif {form!r} == "expand":   # a view in torch, of no memory: gradflow's broadcast has a limit
            out = self.w[:1, :1].expand(10 ** 8, 10 ** 7)  # @expand
        else:
            out, _ = torch.topk(self.w, 0, dim=1)  # @topk
        return {{"loss": out.sum() + self.w.sum()}}


def step():
    return {{"module": Call(), "inputs": (torch.tensor([0, 1, 9, 2, 3]),)}}
"""


@pytest.mark.parametrize("form, says", [
    # index_add is gradflow's scatter_add, topk a take at the line of its indices: neither is named
    ("index_add", "index 9 is out of range for size 4"),
    ("topk", "this call gives shape [5, 0], an empty tensor: gradflow needs at least one element in every "
             "tensor (torch allows empty ones)"),
    ("expand", "this call gives shape [100000000, 10000000]: 1e+15 elements, more than gradflow's limit of 1e+14 "
               "for one tensor"),
])
def test_a_call_that_fails_in_gradflows_ops_is_named_by_the_users_line_alone(step_file, form, says):
    path, line_of = step_file(NAMED_BY_THE_USERS_CALL.format(form=form))
    with pytest.raises(ModelError) as caught:
        gradflow.analyze(gradflow.load(f"{path}:step"))
    assert (caught.value.path, caught.value.line, caught.value.message) == (path, line_of(form), says)
