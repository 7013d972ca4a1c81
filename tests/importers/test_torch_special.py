"""torch.lgamma, digamma, erfinv, xlogy and mvlgamma (under their torch.special names too), and
torch.quantile and nanquantile, imported from training steps and checked against torch.autograd
parameter by parameter, in float64 and in float32: the poles and edges (lgamma and digamma at 0 and
the negative integers, erfinv at +-1 and beyond, xlogy at x == 0 beside y 0, inf and NaN); every
interpolation of a quantile, q a number, a tensor or a parameter, over every entry or along a dim,
keepdim, ties and NaN; and three steps as users write them: a Beta / Gamma likelihood through
lgamma, an inverse-CDF (Gaussian copula) step through erfinv, a CVaR and a masked median loss
through torch.quantile."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import gradflow  # noqa: E402
from gradflow.errors import ModelError  # noqa: E402
from gradflow.importers import import_python  # noqa: E402
from gradflow.importers.torch.target import load_step  # noqa: E402
from tests.importers.conftest import check  # noqa: E402


def same_in_float32(path: str, func: str, rtol: float = 1e-5) -> None:
    """gradflow's float32 run against the step run by torch as written (float32): values and gradients
    to float32's rounding, inf and NaN where torch's are, every gradient float32."""
    report = gradflow.analyze(gradflow.load(f"{path}:{func}", dtype="float32"))
    step = load_step(path, func)
    params = dict(step.module.named_parameters())
    losses = step.module(*step.inputs)
    values = {loss.name: loss.value for loss in report.losses}
    for loss, value in losses.items():
        np.testing.assert_allclose(values[loss], value.item(), rtol=rtol, err_msg=loss)
        grads = torch.autograd.grad(value, list(params.values()), allow_unused=True, retain_graph=True)
        for name, g in zip(params, grads):
            if g is None:
                assert report.status(name, loss) in ("blocked", "unreachable"), (loss, name)
                continue
            ours = report.grad(name, loss)
            assert ours.dtype == np.float32, (loss, name)
            np.testing.assert_allclose(ours, g.numpy(), rtol=rtol, atol=1e-6, err_msg=f"{loss} {name}")


SPECIAL = """
class Special(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 4)
        # near lgamma's zeros 1 and 2, below 1, between negative integers, far out
        self.a = nn.Parameter(torch.tensor([0.5, 1.0, 2.0, 3.5, -0.5, -2.5, 40.0]))
        self.poles = nn.Parameter(torch.tensor([0.0, -1.0, -2.0, 1e-30]))
        self.p = nn.Parameter(torch.tensor([-0.9, -0.3, 0.0, 0.4, 0.999]))
        self.edges = nn.Parameter(torch.tensor([1.0, -1.0, 1.5]))
        self.x = nn.Parameter(torch.tensor([0.0, 0.0, 0.0, 1.5, -2.0, 0.0, 2.0]))
        self.y = nn.Parameter(torch.tensor([0.0, 2.0, -1.0, 3.0, 0.5, 1.0, 0.0]))

    def forward(self, z, far):
        h, n, a = torch.tanh(self.lin(z)), torch.arange(1.0, 8.0), self.a
        return {"lgamma_loss": (torch.lgamma(a) * n).sum() + torch.special.gammaln(h + 2).sum() + a.lgamma().sum(),
                "digamma_loss": (torch.digamma(a) * n).sum() + torch.special.psi(h + 2).sum()
                                + torch.special.digamma(a).sum() + torch.polygamma(0, h + 1).sum()
                                + torch.special.polygamma(0, a).sum(),
                "lgamma_poles": (torch.lgamma(self.poles) * torch.arange(4.0)).sum(),      # inf, digamma's slopes
                "digamma_poles": (torch.digamma(self.poles[1:]) * 2).sum(),                # NaN, trigamma's huge ones
                "erfinv_loss": (torch.erfinv(self.p) * torch.arange(5.0)).sum() + torch.special.erfinv(h * 0.9).sum(),
                "erfinv_edges": torch.erfinv(self.edges).sum(),                            # inf, inf, NaN
                "xlogy_loss": (torch.xlogy(self.x, self.y) * torch.arange(7.0)).sum()
                              + torch.special.xlogy(h, 2.0).sum()
                              + torch.xlogy(2.0, h.abs() + 1).sum() + torch.special.xlogy(h + 1.5, h + 2).sum(),
                "xlogy_inf": torch.xlogy(self.x[:2], far).sum(),                           # 0 log inf, 0 log 2
                "mvlgamma_loss": torch.mvlgamma(a[:4] + 2, 3).sum() + torch.special.multigammaln(h + 3, 2).sum()
                                 + torch.mvlgamma(a[:4] + 1, 1).sum()}


def step():
    torch.manual_seed(0)
    return {"module": Special(), "inputs": (torch.randn(5, 3), torch.tensor([float("inf"), 2.0]))}
"""


def test_import_special_functions_give_torch_values_and_gradients_at_their_poles(step_file, same_as_torch):
    path, _ = step_file(SPECIAL)
    report = check(path, "step", same_as_torch)
    slopes = report.grad("poles", "lgamma_poles")   # 0 * -inf, then NaN at -1 and -2; -1 / x at 1e-30
    assert np.isnan(slopes[:3]).all() and slopes[3] == pytest.approx(-3e30)
    assert report.grad("poles", "digamma_poles")[1:] == pytest.approx([2 * 6.580790147320947e+32,
                                                                        2 * 1.6451975368302367e+32, 2e60])
    assert report.grad("edges", "erfinv_edges")[:2].tolist() == [np.inf, np.inf]
    assert report.grad("x", "xlogy_inf")[:2].tolist() == [np.inf, np.log(2)]     # 0 log inf: torch's inf, not 0
    assert np.isnan(report.grad("y", "xlogy_loss")[0])                         # 0 / 0 at x == y == 0


def test_import_special_functions_in_float32_give_torchs_float32_results(step_file):
    path, _ = step_file(SPECIAL)
    same_in_float32(path, "step")


TRIGAMMA = """
class Trigamma(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.tensor([0.5, 2.0]))

    def forward(self):
        return {"loss": torch.polygamma(1, self.a).sum()}  # @polygamma


def step():
    return {"module": Trigamma(), "inputs": ()}
"""


def test_import_polygamma_of_a_higher_order_is_refused_at_its_line(step_file):
    path, line_of = step_file(TRIGAMMA)
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:step")
    assert caught.value.line == line_of("polygamma")
    assert caught.value.message == "unsupported op aten.polygamma.default of order 1 (gradflow has order 0, digamma)"


QUANTILES = """
class Quantiles(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 5)
        # ties in rows and columns
        self.w = nn.Parameter(torch.tensor([[3.0, 1.0, 2.0, 1.0, 4.0], [0.5, -1.0, 2.0, 2.0, 7.0],
                                            [1.0, 1.0, 1.0, 0.0, 3.0]]))
        self.q = nn.Parameter(torch.tensor([0.3, 0.6, 0.85]))     # a learned q: torch's gradient into it too

    def forward(self, x, qs, holes):
        h, w, m = self.lin(x), self.w, torch.arange(18.0).reshape(3, 6)
        out = {}
        for how in ("linear", "lower", "higher", "midpoint", "nearest"):
            out[f"q_{how}"] = (torch.quantile(w, 0.3, interpolation=how)
                               + torch.quantile(h, 0.75, dim=1, interpolation=how).sum() * 2
                               + (torch.quantile(w, qs, dim=0, keepdim=True, interpolation=how)
                                  * torch.arange(15.0).reshape(3, 1, 5)).sum()
                               + (torch.quantile(h, qs, dim=-1, interpolation=how) * m).sum()
                               + torch.quantile(h, qs, keepdim=True, interpolation=how).sum()
                               + torch.quantile(w, torch.tensor(0.5), dim=1, keepdim=True, interpolation=how).sum()
                               + torch.quantile(w[0, 0], 0.5, interpolation=how) + w.quantile(0.4, 0).sum())
        out["learned_q"] = (torch.quantile(w, self.q, dim=1) * torch.arange(9.0).reshape(3, 3)).sum()
        out["nan_rows"] = (torch.quantile(h + holes, 0.4, dim=1) * torch.arange(6.0)).sum()   # NaN where a row has one
        out["nan_skipped"] = (torch.nanquantile(h[:5] + holes[:5], qs, dim=1) * m[:, :5]).sum() \\
            + torch.nanquantile(h[:5] + holes[:5], 0.5, interpolation="nearest")
        out["all_nan"] = torch.nanquantile(h + holes, 0.5, dim=1).sum()    # a row of NaN only: NaN
        return out


def step():
    torch.manual_seed(0)
    nan = float("nan")
    holes = torch.zeros(6, 5)
    holes[1, 2] = holes[3, 0] = holes[3, 4] = nan
    holes[5] = nan
    return {"module": Quantiles(), "inputs": (torch.randn(6, 3), torch.tensor([0.1, 0.5, 0.9]), holes)}
"""


def test_import_quantile_gives_torch_gradients_for_every_interpolation_q_dim_and_nan(step_file, same_as_torch):
    path, _ = step_file(QUANTILES)
    report = check(path, "step", same_as_torch)
    assert report.status("q", "learned_q") == "flows" and report.status("q", "q_linear") == "unreachable"
    assert np.isnan(report.losses[[loss.name for loss in report.losses].index("all_nan")].value)
    assert report.status("lin.weight", "all_nan") == "flows"   # the NaN row's first NaN takes the gradient


def test_import_quantile_in_float32_gives_torchs_float32_results(step_file):
    path, _ = step_file(QUANTILES)
    same_in_float32(path, "step", rtol=2e-5)


TIES = """
class Ties(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([2.0, 1.0, 2.0, 0.0, 1.0] * (n // 5)))

    def forward(self):
        w = self.w
        return {"q_loss": torch.quantile(w, 0.3) + torch.quantile(w, 0.5) * 2 + torch.quantile(w, 0.9) * 3}


def short():
    return {"module": Ties(15), "inputs": ()}


def long():
    return {"module": Ties(40), "inputs": ()}
"""


def test_import_quantile_ties_get_torchs_gradients_up_to_16_entries_and_each_tied_groups_total_beyond(
        step_file, same_as_torch):
    path, _ = step_file(TIES)
    check(path, "short", same_as_torch)   # torch's sort keeps ties in order up to 16 entries
    report = gradflow.analyze(gradflow.load(f"{path}:long"))
    step = load_step(path, "long")
    (loss,) = step.module().values()
    loss.backward()
    w, theirs, ours = step.module.w.detach().numpy(), step.module.w.grad.numpy(), report.grad("w", "q_loss")
    assert report.losses[0].value == pytest.approx(loss.item())
    for value in np.unique(w):
        assert ours[w == value].sum() == pytest.approx(theirs[w == value].sum())


LIKELIHOODS = """
from torch.distributions import Beta, Gamma, Normal, Poisson


class Likelihoods(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 2)
        self.log_rate = nn.Parameter(torch.tensor([0.3, -0.2, 0.1]))

    def forward(self, x, y, counts):
        conc = F.softplus(self.head(x)) + 1e-3                   # learned concentrations, as users write them
        a, b = conc[:, 0], conc[:, 1]
        log_beta = torch.lgamma(a) + torch.lgamma(b) - torch.lgamma(a + b)
        beta_nll = (log_beta - (a - 1) * torch.log(y) - (b - 1) * torch.log1p(-y)).mean()
        rate = self.log_rate.exp()
        gamma = Gamma(a, rate[:1])
        return {"beta_nll": beta_nll,
                "beta_dist_nll": -Beta(a, b).log_prob(y).mean(),
                "gamma_nll": -gamma.log_prob(y * 3).mean() - 0.01 * gamma.entropy().mean(),   # xlogy, digamma
                "poisson_nll": -Poisson(rate).log_prob(counts).sum()}                        # xlogy(k, rate)


def step():
    torch.manual_seed(0)
    return {"module": Likelihoods(), "inputs": (torch.randn(8, 4), torch.rand(8) * 0.9 + 0.05,
                                                torch.tensor([0.0, 3.0, 1.0]))}
"""


COPULA = """
class Copula(nn.Module):
    def __init__(self):
        super().__init__()
        self.mu, self.log_sigma = nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(3))
        self.rho = nn.Parameter(torch.tensor(0.3))

    def forward(self, u, target):
        z = torch.erfinv(2 * u - 1) * 2 ** 0.5                   # the standard normal's inverse CDF
        x = self.mu + self.log_sigma.exp() * z                     # each margin from its ranks
        r = torch.tanh(self.rho)
        # the Gaussian copula's log-density of the first two margins' normal scores
        copula = -0.5 * torch.log1p(-r * r) - (r * r * (z[:, 0] ** 2 + z[:, 1] ** 2) - 2 * r * z[:, 0] * z[:, 1]) \\
            / (2 * (1 - r * r))
        icdf = torch.distributions.Normal(self.mu, self.log_sigma.exp()).icdf(u)
        return {"fit": F.mse_loss(x, target) - copula.mean(), "icdf_loss": (icdf * target).mean()}


def step():
    torch.manual_seed(0)
    return {"module": Copula(), "inputs": (torch.rand(16, 3) * 0.98 + 0.01, torch.randn(16, 3))}
"""


RISK = """
class Risk(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))

    def forward(self, x, y):
        pred = self.net(x)                                           # [20, 3]
        losses = ((pred - y) ** 2).mean(1)
        alpha = 0.9
        var = torch.quantile(losses, alpha)                          # value at risk: its gradient too
        cvar = var + F.relu(losses - var).mean() / (1 - alpha)       # Rockafellar-Uryasev
        taus = torch.tensor([0.1, 0.5, 0.9])
        resid = torch.where(torch.isnan(y), y, pred - y)             # missing targets stay NaN
        median_err = torch.nanquantile(resid.abs(), 0.5, dim=1).mean()
        pinball = torch.maximum(taus * resid, (taus - 1) * resid).nan_to_num().mean()
        spread = (torch.quantile(pred, taus, dim=0) * torch.tensor([[1.0], [0.0], [-1.0]])).sum()
        return {"cvar": cvar, "median_err": median_err, "pinball": pinball + 0.1 * spread}


def step():
    torch.manual_seed(0)
    y = torch.randn(20, 3)
    y[2, 1] = y[7, 0] = y[7, 2] = float("nan")
    return {"module": Risk(), "inputs": (torch.randn(20, 4), y)}
"""


@pytest.mark.parametrize("body", [LIKELIHOODS, COPULA, RISK], ids=["beta-gamma-poisson", "copula", "cvar-median"])
def test_import_realistic_steps_through_special_functions_and_quantiles(step_file, same_as_torch, body):
    path, _ = step_file(body)
    report = check(path, "step", same_as_torch)
    assert all(any(pair.status == "flows" for pair in param.grads.values()) for param in report.params)
    same_in_float32(path, "step", rtol=1e-4)
