"""More ops against PyTorch: smooth_l1 and huber losses, kl_div, logsigmoid, expm1, log2, exp2,
log10, sinh, cosh, logaddexp, xlogy (and torch.special's names), nan_to_num, the activations
mish, selu, celu, hardswish, hardsigmoid, glu, softsign and prelu, weight_norm and spectral_norm
(mv, dot, vdot); values and gradients compared at their kinks, edges, zeros and large or infinite
inputs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import gradflow  # noqa: E402
import numpy as np  # noqa: E402
from tests.importers.conftest import check, same_values_as_torch  # noqa: E402


ROBUST = """
class Robust(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 8)
        # differences 0.5, -1, 1, 2, 1e6, -1e6, 0, 0: inside, at beta = delta = 1 (and at delta = 2),
        # beyond, far beyond, and at the tie
        self.pred = nn.Parameter(torch.tensor([0.5, -1.0, 2.0, 3.0, 1e6, -1e6, 0.25, 0.0]))
        self.target = nn.Parameter(torch.tensor([0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.25, 0.0]))

    def forward(self, x, far):
        p, t, h, n = self.pred, self.target, self.lin(x), torch.arange(1.0, 9.0)
        q, u = torch.cat([p, far]), torch.cat([t, t[:2]])        # far: inf and -inf
        return {"smooth_mean": F.smooth_l1_loss(p, t) + F.smooth_l1_loss(h, t.expand(4, 8)),
                "smooth_sum": F.smooth_l1_loss(p, t, beta=2.0, reduction="sum")
                              + nn.SmoothL1Loss(beta=0.5)(h, t.expand(4, 8)),
                "smooth_none": (F.smooth_l1_loss(p, t, reduction="none", beta=0.5) * n).sum(),
                "smooth_l1": F.smooth_l1_loss(p, t, beta=0.0)
                             + nn.SmoothL1Loss(beta=0.0, reduction="sum")(h, t.expand(4, 8)),
                "huber_mean": F.huber_loss(p, t) + nn.HuberLoss(delta=2.0)(h, t.expand(4, 8)),
                "huber_sum": F.huber_loss(p, t, delta=2.0, reduction="sum")
                             + F.huber_loss(h, t.expand(4, 8), delta=0.3, reduction="sum"),
                "huber_none": (F.huber_loss(p, t, reduction="none", delta=2.0) * n).sum(),
                "infinite": (F.huber_loss(q, u, reduction="none")
                             + F.smooth_l1_loss(q, u, reduction="none", beta=0.5)).sum()}


def step():
    torch.manual_seed(0)
    return {"module": Robust(), "inputs": (torch.randn(4, 3), torch.tensor([float("inf"), -float("inf")]))}
"""


def test_import_smooth_l1_and_huber_losses_give_torch_values_and_gradients_at_their_kinks(step_file, same_as_torch):
    path, _ = step_file(ROBUST)
    report = check(path, "step", same_as_torch)
    # an infinite difference: the loss is infinite, its gradient torch's finite delta (or 1)
    assert {loss.name: loss.value for loss in report.losses}["infinite"] == np.inf
    assert np.isfinite(report.grad("target", "infinite")).all()


KL = """
class Distill(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 4)
        self.teacher = nn.Linear(3, 4)
        self.mask = nn.Parameter(torch.tensor([[1.0, 0.0, 2.0, 0.5], [0.0, 0.0, 1.0, 3.0]]))

    def forward(self, x, soft):
        logp = F.log_softmax(self.lin(x), 1)                  # [6, 4]
        q = F.softmax(self.teacher(x), 1)                      # a target that takes gradient
        held = soft * torch.tensor([1.0, 0.0, 1.0, 1.0])       # a constant target with zeros
        zeros = q[:2] * self.mask                              # zeros in a target that takes gradient
        logq = F.log_softmax(self.teacher(x), 1)
        return {"kl_batchmean": F.kl_div(logp, held, reduction="batchmean")
                                + nn.KLDivLoss(reduction="batchmean")(logp, q),
                "kl_mean": F.kl_div(logp, held) + F.kl_div(logp, q, reduction="mean"),
                "kl_sum": F.kl_div(logp, held, reduction="sum") + F.kl_div(logp, q, reduction="sum"),
                "kl_none": (F.kl_div(logp, q, reduction="none") * torch.arange(24.0).reshape(6, 4)).sum(),
                "log_target": F.kl_div(logp, logq, log_target=True, reduction="batchmean")
                              + F.kl_div(logp, logq, log_target=True)
                              + (F.kl_div(logp, logq, log_target=True, reduction="none") ** 2).sum(),
                "zero_target": F.kl_div(logp[:2], zeros, reduction="sum")}


def step():
    torch.manual_seed(0)
    return {"module": Distill(), "inputs": (torch.randn(6, 3), torch.softmax(torch.randn(6, 4), 1))}
"""


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides the total loss")
def test_import_kl_div_gives_torch_values_and_gradients_with_zeros_in_the_target(step_file, same_as_torch):
    path, _ = step_file(KL)
    report = check(path, "step", same_as_torch)
    # a zero in a target that takes gradient: the loss is finite, torch's gradient into it NaN
    value = {loss.name: loss.value for loss in report.losses}
    assert np.isfinite(value["zero_target"]) and np.isfinite(value["kl_batchmean"])
    assert np.isnan(report.grad("mask", "zero_target")).sum() == 3
    assert np.isfinite(report.grad("lin.weight", "zero_target")).all()


CORNERS = "[-1000.0, -710.0, -30.0, -3.0, -1.0, -0.5, -1e-12, 0.0, 1e-12, 0.5, 1.0, 3.0, 30.0, 710.0, 1000.0]"

MATH = f"""
class Math(nn.Module):
    def __init__(self):
        super().__init__()
        self.z = nn.Parameter(torch.tensor({CORNERS}, dtype=torch.float64))
        self.small = nn.Parameter(torch.tensor([-0.7, -1e-12, 0.0, 3e-8, 0.9], dtype=torch.float64))
        self.pos = nn.Parameter(torch.tensor([1e-300, 1e-6, 0.5, 1.0, 2.0, 1e6, 1e300], dtype=torch.float64))
        self.a = nn.Parameter(torch.tensor([0.0, 1.0, -2.0, 700.0, -800.0, 5.0, 3.0, 1e6], dtype=torch.float64))
        self.b = nn.Parameter(torch.tensor([0.0, 1.0, 3.0, -700.0, 800.0, 5.0 + 1e-9, -1e6, 1e6], dtype=torch.float64))

    def forward(self, x):
        z, s, pos, a, b = self.z, self.small, self.pos, self.a, self.b
        n = torch.arange(1.0, 16.0)
        m = torch.tensor([1.0, 1e9, 1.0, 1e6, 1.0])   # weights that make the tiny gradients count
        return {{"expm1": (torch.expm1(z.clamp(max=700)) * n).sum(),
                "expm1_small": (torch.expm1(s) * m).sum() + torch.special.expm1(s).sum(),
                "sinh": (torch.sinh(z[2:-2]) * n[2:-2]).sum(),
                "sinh_small": (torch.sinh(s) * m).sum(),
                "cosh": (torch.cosh(z[2:-2]) * n[2:-2]).sum(),
                "cosh_small": (torch.cosh(s) * m).sum(),
                "far": torch.sinh(z[-3:]).sum() + torch.cosh(z[:2]).sum() + torch.expm1(z[-2:]).sum(),
                "log2": (torch.log2(pos) * torch.arange(7.0)).sum(),
                "log10": (torch.log10(pos) * torch.arange(7.0)).sum(),
                "exp2": (torch.exp2(z) * n).sum() + torch.exp2(s).sum() + torch.special.exp2(s).sum(),
                "logaddexp": (torch.logaddexp(a, b) * torch.arange(1.0, 9.0)).sum()
                             + torch.logaddexp(a[:, None], b).sum() + torch.logaddexp(z, z).sum()
                             + torch.exp(-torch.logaddexp(x, x).abs()).sum()}}   # x: -inf and inf


def step():
    return {{"module": Math(), "inputs": (torch.tensor([-float("inf"), float("inf")]),)}}
"""


def test_import_exponentials_logarithms_and_logaddexp_give_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(MATH)
    report = check(path, "step", same_as_torch)
    value = {loss.name: loss.value for loss in report.losses}
    assert value["far"] == np.inf


XLOGY = """
class Entropy(nn.Module):
    def __init__(self):
        super().__init__()
        # x == 0 against y == 0, y > 0, y < 0, y large; x != 0 against y > 0 and y large
        self.x = nn.Parameter(torch.tensor([0.0, 0.0, 0.0, 0.0, 2.0, -3.0, 0.5, 1.0], dtype=torch.float64))
        self.y = nn.Parameter(torch.tensor([0.0, 0.5, -1.0, 1e300, 1.5, 4.0, 1e-300, 1e300], dtype=torch.float64))

    def forward(self, poles, edge):
        x, y, n = self.x, self.y, torch.arange(1.0, 9.0)
        p = torch.softmax(self.y[:3], 0) * torch.tensor([1.0, 0.0, 1.0])
        return {"xlogy_loss": (torch.xlogy(x, y) * n).sum(),
                "scalars": torch.xlogy(2.0, y[4:]).sum() + (torch.xlogy(x, 3.0) + torch.xlogy(0.0, y)).sum()
                           + torch.xlogy(edge[:2], edge[2:]).sum()      # 0 against inf and -inf: 0
                           + (torch.special.xlogy(x, y) * n).sum() + torch.special.xlogy(x, 0.5).sum(),
                "entropy": -torch.xlogy(p, p).sum(),
                "poles": torch.xlogy(x[6:] * poles[:2], y[:2] * poles[2:4]).sum()}   # x > 0 against y == 0: -inf


def step():
    return {"module": Entropy(), "inputs": (torch.tensor([1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]),
                                            torch.tensor([0.0, 0.0, float("inf"), -float("inf")]))}
"""


def test_import_xlogy_gives_torch_zero_where_x_is_zero_and_torch_gradients_there(step_file, same_as_torch):
    path, _ = step_file(XLOGY)
    report = check(path, "step", same_as_torch)
    grad = report.grad("y", "xlogy_loss")
    assert np.isnan(grad[0]) and (grad[1:4] == 0).all()    # 0 / 0 at x == y == 0, as torch
    assert (report.grad("x", "xlogy_loss")[:4] == [0, 2 * np.log(0.5), 0, 4 * np.log(1e300)]).all()


FILLS = """
class Fills(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([1.0, -2.0, 3.0, 0.5, 4.0]))

    def forward(self, x):
        z, n = x + self.w, torch.arange(1.0, 6.0)     # x: nan, inf, -inf, 1, 2
        return {"defaults": (torch.nan_to_num(z) * n * 1e-300).sum(),
                "chosen": (torch.nan_to_num(z, nan=0.5, posinf=7.0, neginf=-9.0) * n).sum()
                          + torch.nan_to_num(z, posinf=float("inf")).clamp(max=100).sum(),
                "scaled": (torch.nan_to_num(z) * 1e-30 * n).sum(),
                "infinite": (torch.nan_to_num(z, nan=float("inf"), posinf=-float("inf"), neginf=3.0)
                             .clamp(-50, 60) * n).sum()}


def step():
    return {"module": Fills(), "inputs": (torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0, 2.0]),)}
"""


def test_import_nan_to_num_replaces_as_torch_with_no_gradient_where_not_finite(step_file, same_as_torch):
    path, _ = step_file(FILLS)
    report = check(path, "step", same_as_torch)
    assert (report.grad("w", "chosen")[:3] == 0).all()


def test_import_nan_to_num_in_float32_replaces_inf_by_float32s_largest_number(step_file):
    """float64's largest number, torch's default for the float64 tensors of the import, is inf in a
    float32 run: the loss would be inf where torch's own float32 run is finite."""
    import gradflow
    path, _ = step_file(FILLS)
    report = gradflow.analyze(gradflow.load(f"{path}:step", dtype="float32"))
    z = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0, 2.0]) + torch.tensor([1.0, -2.0, 3.0, 0.5, 4.0])
    value = next(loss.value for loss in report.losses if loss.name == "scaled")
    assert np.isclose(value, (torch.nan_to_num(z) * 1e-30 * torch.arange(1.0, 6.0)).sum().item(), rtol=1e-6)


ACTIVATIONS = f"""
class Activations(nn.Module):
    def __init__(self):
        super().__init__()
        self.z = nn.Parameter(torch.tensor({CORNERS}))
        self.edges = nn.Parameter(torch.tensor([-3.5, -3.0, -1.0, 0.0, 1.0, 3.0, 3.5]))
        self.deep = nn.Parameter(torch.tensor([-40.0, -50.0, -700.0], dtype=torch.float64))
        self.conv = nn.Conv2d(1, 4, 1)
        self.channels = nn.PReLU(4)
        self.single = nn.PReLU()

    def forward(self, x):
        z, e, n = self.z, self.edges, torch.arange(1.0, 16.0)
        h = self.conv(x)                         # [2, 4, 3, 2]
        k = torch.arange(1.0, 8.0)
        return {{"logsigmoid": (F.logsigmoid(z) * n).sum(),
                "mish": (F.mish(z) * n).sum(),
                "selu": (F.selu(z) * n).sum() + (F.selu(e) * k).sum(),
                "celu": (F.celu(z) * n).sum() + (F.celu(e, alpha=2.0) * k).sum() + F.celu(h, 0.5).sum(),
                "far_below_selu": F.selu(self.deep).sum(),
                "far_below_celu": F.celu(self.deep, 0.5).sum() + F.celu(self.deep[:2]).sum(),
                "far_below_expm1": torch.expm1(self.deep).sum(),
                "hardswish": (F.hardswish(e) * k).sum() + (F.hardswish(z) * n).sum() + nn.Hardswish()(h).sum(),
                "hardsigmoid": (F.hardsigmoid(e) * k).sum() + (F.hardsigmoid(z) * n).sum(),
                "glu": (F.glu(h, 1) * torch.arange(24.0).reshape(2, 2, 3, 2)).sum()
                       + (F.glu(h, -1) ** 2).sum() + F.glu(z[1:], 0).sum(),
                "softsign": (F.softsign(z) * n).sum(),
                "prelu": (self.channels(h) * torch.arange(48.0).reshape(2, 4, 3, 2)).sum()
                         + (self.single(e) * k).sum() + self.single(h).sum() + F.prelu(e, self.single.weight[0]).sum()}}


def step():
    torch.manual_seed(0)
    return {{"module": Activations(), "inputs": (torch.cat([torch.zeros(1, 1, 3, 2), torch.randn(1, 1, 3, 2)]),)}}
"""


def test_import_activations_give_torch_values_and_gradients_at_their_edges(step_file, same_as_torch):
    path, _ = step_file(ACTIVATIONS)
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    same_values_as_torch(report, path, "step")
    same_as_torch(report, path, "step", only={loss.name for loss in report.losses} - {"far_below_expm1"})
    # the slopes at -3.5, -3, -1, 0, 1, 3, 3.5 (times 1..7): hardswish's 0 at -3 and 1 at 3,
    # hardsigmoid's 0 at both
    k = np.arange(1.0, 8.0)
    np.testing.assert_allclose(report.grad("edges", "hardswish"), k * [0, 0, 1 / 6, 0.5, 5 / 6, 1, 1])
    np.testing.assert_allclose(report.grad("edges", "hardsigmoid"), k * [0, 0, 1 / 6, 1 / 6, 1 / 6, 0, 0])
    # far below 0, selu's and celu's gradients are tiny but there, as torch's e ** x; so is expm1's,
    # where torch's (its result + 1) rounds to 0: gradflow keeps e ** x, the derivative
    for loss in ("far_below_selu", "far_below_celu"):
        assert report.status("deep", loss) == "flows" and report.grad("deep", loss)[0] > 0
    np.testing.assert_allclose(report.grad("deep", "far_below_expm1"), np.exp([-40.0, -50.0, -700.0]), rtol=1e-12)


ATEN_SMOOTH_L1 = """
class Direct(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x, y):
        return {"loss": torch.ops.aten.smooth_l1_loss(self.lin(x), y, 1, 0.0)}   # @aten


def step():
    return {"module": Direct(), "inputs": (torch.randn(4, 3), torch.randn(4, 2))}
"""


def test_import_refuses_aten_smooth_l1_with_beta_zero_whose_gradient_is_not_the_l1_loss(step_file):
    from gradflow.errors import ModelError
    from gradflow.importers import import_python
    path, line_of = step_file(ATEN_SMOOTH_L1)
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:step")
    assert caught.value.line == line_of("aten")
    assert caught.value.message.startswith("unsupported op aten.smooth_l1_loss.default with beta=0")


NORMS = """
from torch.nn.utils import parametrizations, spectral_norm, weight_norm


class Normed(nn.Module):
    def __init__(self, train):
        super().__init__()
        self.wn = parametrizations.weight_norm(nn.Linear(4, 3))
        self.wn_all = parametrizations.weight_norm(nn.Linear(3, 3), dim=None)
        self.old_wn = weight_norm(nn.Linear(3, 2), dim=1)
        self.sn = parametrizations.spectral_norm(nn.Linear(4, 3))
        self.old_sn = spectral_norm(nn.Linear(3, 2))
        self.train(train)

    def forward(self, x, m, v):
        h = self.old_wn(torch.tanh(self.wn_all(self.wn(x))))
        s = self.old_sn(torch.relu(self.sn(x)))
        return {"weight_norm": h.pow(2).sum(), "spectral_norm": s.pow(2).sum(),
                "mv": (torch.mv(m, v) * torch.dot(v, v) + torch.vdot(v, v) + m.H.sum()).sum()}


def step(train=True):
    torch.manual_seed(0)
    return {"module": Normed(train), "inputs": (torch.randn(5, 4), torch.randn(3, 2), torch.randn(2))}


def evaluating():
    return step(False)
"""


@pytest.mark.filterwarnings("ignore:`torch.nn.utils.weight_norm` is deprecated:FutureWarning")
@pytest.mark.parametrize("func", ["step", "evaluating"])
def test_import_weight_norm_spectral_norm_and_their_products_give_torch_values_and_gradients(step_file,
                                                                                           same_as_torch, func):
    path, _ = step_file(NORMS)
    report = check(path, func, same_as_torch)
    assert {"wn.parametrizations.weight.original0", "old_wn.weight_g", "sn.parametrizations.weight.original",
            "old_sn.weight_orig"} <= {p.name for p in report.params}
    assert report.status("sn.parametrizations.weight.original", "spectral_norm") == "flows"


PRODUCTS = """
class Attending(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)   # need_weights=True: its scores by baddbmm
        self.register_buffer("mask", torch.tensor([[0.0, -1.0, 0.5], [0.0, 0.0, -2.0], [1.0, 0.0, 0.0]]))
        self.a, self.b, self.m = (nn.Parameter(torch.randn(*s)) for s in ((3, 4), (4, 3), (3, 3)))

    def forward(self, x):
        a, b, m = self.a, self.b, self.m
        out, weights = self.attn(x, x, x, attn_mask=self.mask)
        mixed = torch.addmm(m, a, b, beta=0.5, alpha=2.0) + torch.addmm(m, a, b, beta=0.0)
        batched = torch.baddbmm(m.expand(2, 3, 3), a.expand(2, 3, 4), b.expand(2, 4, 3), alpha=-1.5)
        return {"attention": out.pow(2).sum() + weights.sum(),
                "products": mixed.pow(2).sum() + batched.sum() + (a.mT @ a).sum() + (a.mH * 2).sum()}


def step():
    torch.manual_seed(0)
    return {"module": Attending(), "inputs": (torch.randn(2, 3, 8),)}
"""


def test_import_addmm_and_baddbmm_with_beta_and_alpha_and_attention_returning_weights(step_file, same_as_torch):
    path, _ = step_file(PRODUCTS)
    check(path, "step", same_as_torch)


DROPPED = """
class Dropped(nn.Module):
    def __init__(self, p, how):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(8, 8) for _ in range(3))
        self.p, self.how = p, how
        self.register_buffer("mask", torch.tensor([[True, False, True, False], [False] * 4,
                                                   [True] * 4, [True, True, False, False]]))

    def forward(self, x):
        q, k, v = (f(x).reshape(2, 4, 2, 4).transpose(1, 2) for f in (self.q, self.k, self.v))
        if self.how == "causal":
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p, is_causal=True)
        elif self.how == "bool":
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask, dropout_p=self.p)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask.float() - 1.0, dropout_p=self.p,
                                                 scale=0.3)
        return {"loss": out.pow(2).sum() + out.sum()}


def all_dropped(how):
    torch.manual_seed(0)
    return {"module": Dropped(1.0, how), "inputs": (torch.randn(2, 4, 8),)}


def causal():
    return all_dropped("causal")


def boolean():
    return all_dropped("bool")


def additive():
    return all_dropped("float")


def layer():
    torch.manual_seed(0)
    return {"module": nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True),
            "inputs": (torch.randn(2, 4, 8),)}


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True)

    def forward(self, x):
        return {"loss": self.block(x, src_mask=nn.Transformer.generate_square_subsequent_mask(4)).pow(2).mean()}


def training():
    torch.manual_seed(0)
    return {"module": Layer(), "inputs": (torch.randn(2, 4, 8),)}
"""


@pytest.mark.parametrize("func", ["causal", "boolean", "additive"])
def test_attention_with_every_weight_dropped_gives_torch_zeros_and_zero_gradients(step_file, same_as_torch, func):
    # dropout_p=1 drops every attention weight in torch and gradflow alike: the one exact case
    path, _ = step_file(DROPPED)
    report = check(path, func, same_as_torch)
    assert {report.status(p.name, "loss") for p in report.params} == {"zero"}


def test_a_transformer_layer_in_training_mode_imports_its_attention_dropout(step_file):
    # nn.TransformerEncoderLayer trains with dropout 0.1 in its attention: gradflow's own masks
    path, _ = step_file(DROPPED)
    model = gradflow.load(f"{path}:training")
    report = gradflow.analyze(model)
    assert {report.status(p.name, "loss") for p in report.params} == {"flows"}
    assert model.entries["scaled_dot_product_attention_weights"].op.name == "dropout"
