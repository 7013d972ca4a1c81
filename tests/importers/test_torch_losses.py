"""Losses, distances and norms against PyTorch: vector norms of every order, torch.dist and
linalg.norm, pairwise_distance, the triplet, margin-ranking, cosine-embedding, hinge-embedding,
soft-margin, multi-label soft-margin, multi-margin, Poisson and Gaussian losses, RMS
normalisation and grouped-query attention; values and gradients compared at zeros, ties and
kinks, with every reduction."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import gradflow  # noqa: E402
import numpy as np  # noqa: E402
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


TRIPLETS = """
class Triplets(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 4)
        # rows: a loss at exactly 0 (margin 1 + 1 - 2), a swap whose two distances tie (eps=0), zeros
        self.a = nn.Parameter(torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]]))
        self.p = nn.Parameter(torch.tensor([[1.0, 0.0], [2.0, 0.0], [1.0, 1.0]]))
        self.n = nn.Parameter(torch.tensor([[2.0, 0.0], [1.0, 0.0], [1.0, 1.0]]))

    def forward(self, x):
        h = self.lin(x)
        a, p, n = h[:4], h[4:8], h[8:]
        out = {}
        for order in (2.0, 1.0, 3.0, 0.5, float("inf")):
            name = "p" + str(order).replace(".", "_")
            out[name] = F.triplet_margin_loss(a, p, n, p=order) \\
                + F.triplet_margin_loss(a, p, n, p=order, swap=True, margin=2.0, reduction="sum") \\
                + (F.pairwise_distance(a, p, p=order) * torch.arange(4.0)).sum() \\
                + F.pairwise_distance(a, n[0], p=order, keepdim=True, eps=0.0).sum()
        out["corners"] = F.triplet_margin_loss(self.a, self.p, self.n, eps=0.0, swap=True, reduction="sum") \\
            + (F.triplet_margin_loss(self.a, self.p, self.n, eps=0.0, p=1.0, reduction="none")
               * torch.arange(1.0, 4.0)).sum() \\
            + F.pairwise_distance(self.a, self.n, eps=0.0).sum() \\
            + F.pairwise_distance(self.a, self.n, p=3.0, eps=0.0).sum() \\
            + F.pairwise_distance(self.a, self.n, p=0.5, eps=0.0).sum() \\
            + nn.TripletMarginLoss(margin=0.5)(self.a, self.p, self.n)
        return out


def step():
    torch.manual_seed(0)
    return {"module": Triplets(), "inputs": (torch.randn(12, 3),)}
"""


def test_import_triplet_margin_loss_and_pairwise_distance_give_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(TRIPLETS)
    report = check(path, "step", same_as_torch)
    # the swap's tie shares the negative's gradient between the anchor and the positive
    assert report.grad("a", "corners")[1, 0] != 0 and report.grad("p", "corners")[1, 0] != 0


MARGINS = """
class Margins(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 4)
        self.s = nn.Parameter(torch.tensor([1.0, 2.0, 0.5, -3.0, 0.0]))
        self.zero = nn.Parameter(torch.zeros(2, 4))
        self.u = nn.Parameter(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))   # orthogonal to its flip: cos 0, the kink

    def forward(self, x, y, labels, counts):
        h = self.lin(x)                           # [6, 4]
        s, out = self.s, {}
        pm = torch.tensor([1.0, -1.0, 1.0, -1.0, 0.0])   # ranking's and hinge's kinks at s[0], multi margin's at s[:2]
        for reduction in ("mean", "sum", "none"):
            def r(loss):
                return loss if reduction != "none" else (loss * torch.arange(1.0, loss.numel() + 1).reshape(loss.shape)).sum()
            out["ranking_" + reduction] = r(F.margin_ranking_loss(h[:, 0], h[:, 1], y, margin=0.3, reduction=reduction)) \\
                + r(F.margin_ranking_loss(s, s.flip(0), pm, margin=1.0, reduction=reduction))
            out["cosine_" + reduction] = r(F.cosine_embedding_loss(h[:3], h[3:], y[:3], reduction=reduction)) \\
                + r(F.cosine_embedding_loss(h[:2], self.zero, y[:2], margin=-0.5, reduction=reduction)) \\
                + r(F.cosine_embedding_loss(self.u, self.u.flip(1), -y[:2], reduction=reduction)) \\
                + r(nn.CosineEmbeddingLoss(margin=0.2, reduction=reduction)(h[:3], h[3:], torch.tensor([-1.0, 0.0, -1.0])))
            out["hinge_" + reduction] = r(F.hinge_embedding_loss(h, y[:, None].expand(6, 4), margin=0.5, reduction=reduction)) \\
                + r(F.hinge_embedding_loss(s, -pm, reduction=reduction))
            out["soft_" + reduction] = r(F.soft_margin_loss(h * 30, y[:, None].expand(6, 4), reduction=reduction))
            out["multilabel_" + reduction] = r(F.multilabel_soft_margin_loss(h, (labels > 0).float(), reduction=reduction)) \\
                + r(F.multilabel_soft_margin_loss(h, (labels > 0).float(), weight=torch.arange(1.0, 5.0).to(h), reduction=reduction))
            out["multi_" + reduction] = r(F.multi_margin_loss(h, labels[:, 0], reduction=reduction)) \\
                + r(F.multi_margin_loss(h, labels[:, 0], p=2, margin=0.7, weight=torch.arange(1.0, 5.0).to(h), reduction=reduction)) \\
                + r(F.multi_margin_loss(s[:4], labels[2:3, 0], reduction=reduction)) \\
                + r(F.multi_margin_loss(torch.stack([s[:4], s[1:]]), torch.tensor([3, 1]), p=2, reduction=reduction))
            out["poisson_" + reduction] = r(F.poisson_nll_loss(h, counts, reduction=reduction)) \\
                + r(F.poisson_nll_loss(h.exp(), counts, log_input=False, full=True, reduction=reduction)) \\
                + r(F.poisson_nll_loss(h, counts, full=True, reduction=reduction)) \\
                + r(F.poisson_nll_loss(torch.relu(h), counts, log_input=False, eps=0.1, reduction=reduction))
            out["gaussian_" + reduction] = r(F.gaussian_nll_loss(h, counts, 0.5, reduction=reduction)) \\
                + r(F.gaussian_nll_loss(h, counts, 1e-9, full=True, eps=1e-4, reduction=reduction))
        return out


def step():
    torch.manual_seed(0)
    labels = torch.tensor([[0, 1, 3, 2], [3, 0, 0, 1], [1, 2, 0, 0], [2, 3, 1, 0], [0, 0, 2, 1], [1, 1, 1, 3]])
    counts = torch.tensor([0.0, 0.5, 1.0, 3.0]).repeat(6, 1)
    return {"module": Margins(), "inputs": (torch.randn(6, 3), torch.tensor([1.0, -1.0, 1.0, 1.0, -1.0, 1.0]),
                                            labels, counts)}
"""


def test_import_margin_embedding_and_count_losses_give_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(MARGINS)
    check(path, "step", same_as_torch)


POISSON = """
class Poisson(nn.Module):
    def __init__(self):
        super().__init__()
        self.rate = nn.Parameter(torch.tensor([0.3, -0.2, 1.5, 0.7]))
        self.t = nn.Parameter(torch.tensor([0.0, 0.5, 1.0, 3.0]))   # a target that trains: 0, at or below 1, above

    def forward(self):
        return {"log_input": F.poisson_nll_loss(self.rate, self.t, full=True, reduction="sum"),
                "rates": F.poisson_nll_loss(self.rate.exp(), self.t[1:].repeat(2)[:4], log_input=False, full=True)}


def step():
    return {"module": Poisson(), "inputs": ()}
"""


def test_import_poisson_nll_loss_gives_a_target_that_trains_torchs_gradient_of_the_stirling_term(step_file, same_as_torch):
    """full=True adds Stirling's term only where the target is above 1: at or below 1 the target's
    gradient is -x alone, and at 0 NaN, as torch's masked_fill of t log t leaves it."""
    path, _ = step_file(POISSON)
    report = check(path, "step", same_as_torch)
    grad = report.grad("t", "log_input")
    assert np.isnan(grad[0])
    np.testing.assert_allclose(grad[1:3], [0.2, -1.5], rtol=1e-7)   # -x: -0.2 and 1.5 as float32 made them


SOFT = """
class Soft(nn.Module):
    def __init__(self):
        super().__init__()
        self.x = nn.Parameter(torch.tensor([800.0, -800.0, 1.0]))

    def forward(self, y):
        return {"loss": F.soft_margin_loss(self.x, y, reduction="sum")}


def step():
    return {"module": Soft(), "inputs": (torch.tensor([-1.0, -1.0, 1.0]),)}
"""


def test_import_soft_margin_loss_is_finite_where_torchs_overflows(step_file):
    """-y x = 800: torch's log1p(exp(-y x)) is inf with a NaN gradient; gradflow's is 800, gradient -y."""
    path, _ = step_file(SOFT)
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    assert report.losses[0].value == pytest.approx(800 + np.log1p(np.exp(-1.0)), rel=1e-12)
    np.testing.assert_allclose(report.grad("x", "loss"), [1.0, 0.0, -1 / (1 + np.e)], rtol=1e-12, atol=1e-300)


RMS = """
class Rms(nn.Module):
    def __init__(self, eps):
        super().__init__()
        self.norm = nn.RMSNorm(4, eps=eps)
        self.wide = nn.RMSNorm([3, 4], eps=1e-5, elementwise_affine=False)
        self.lin = nn.Linear(3, 4)
        self.pad = nn.Parameter(torch.zeros(1, 4))   # a row of zeros (padding)
        with torch.no_grad():
            self.norm.weight.copy_(torch.tensor([1.0, 2.0, -0.5, 3.0]))

    def forward(self, x):
        h = torch.cat([self.lin(x), self.pad])
        return {"affine": (self.norm(h) * torch.arange(20.0).reshape(5, 4)).sum(),
                "plain": (F.rms_norm(h, (4,), eps=self.norm.eps) * torch.arange(20.0).reshape(5, 4)).sum(),
                "wide": (self.wide(h[:3].expand(2, 3, 4)) ** 3).sum()}


def given():
    torch.manual_seed(0)
    return {"module": Rms(1e-6), "inputs": (torch.randn(4, 3),)}


def float32s():
    torch.manual_seed(0)
    return {"module": Rms(torch.finfo(torch.float32).eps), "inputs": (torch.randn(4, 3),)}


def default():
    torch.manual_seed(0)
    return {"module": Rms(None), "inputs": (torch.randn(4, 3),)}
"""


def test_import_rms_norm_with_and_without_weight_gives_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(RMS)
    check(path, "given", same_as_torch)
    check(path, "float32s", same_as_torch)


def test_import_rms_norm_without_eps_takes_float32s_eps_as_the_users_model_trains_with(step_file):
    """eps=None: torch's eps is its tensor's (float64's when the step is rerun in float64), but the
    user's float32 model adds float32's, and so does gradflow's import: a padding row's gradient
    is the float32 model's, weight / sqrt(1.19e-7), not weight / sqrt(2.2e-16)."""
    path, _ = step_file(RMS)
    default = gradflow.analyze(gradflow.load(f"{path}:default"))
    float32s = gradflow.analyze(gradflow.load(f"{path}:float32s"))
    for loss in ("affine", "plain"):
        for param in ("lin.weight", "lin.bias", "norm.weight", "pad"):
            np.testing.assert_array_equal(default.grad(param, loss), float32s.grad(param, loss))
    eps = float(torch.finfo(torch.float32).eps)
    np.testing.assert_allclose(default.grad("pad", "affine")[0], [1.0, 2.0, -0.5, 3.0] * np.arange(16.0, 20.0)
                               / np.sqrt(eps), rtol=1e-12)


GQA = """
class Grouped(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(8, 4 * 6)
        self.kv = nn.Linear(8, 2 * 6 * 2)

    def heads(self, x):
        q = self.q(x).reshape(2, 5, 4, 6).transpose(1, 2)                    # [2, 4 heads, 5, 6]
        return (q, *self.kv(x).reshape(2, 5, 2, 12).transpose(1, 2).chunk(2, -1))  # [2, 2 heads, 5, 6]

    def forward(self, x, keep, bias):
        q, k, v = self.heads(x)
        w = torch.arange(240.0).reshape(2, 4, 5, 6)
        return {"plain": (F.scaled_dot_product_attention(q, k, v, enable_gqa=True) * w).sum(),
                "causal": (F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True) * w).sum(),
                "bool_mask": (F.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True) * w).sum(),
                "float_mask": (F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3,
                                                              enable_gqa=True) * w).sum(),
                "one_head": (F.scaled_dot_product_attention(q[0], k[0, :1], v[0, :1], enable_gqa=True)
                             * w[0]).sum()}


class Dropped(Grouped):
    def forward(self, x, keep, bias):
        return {"loss": F.scaled_dot_product_attention(*self.heads(x), dropout_p=0.3, enable_gqa=True).pow(2).sum(),
                "masked": F.scaled_dot_product_attention(*self.heads(x), attn_mask=keep, dropout_p=0.3,
                                                         enable_gqa=True).pow(2).sum()}


def step(module=Grouped):
    torch.manual_seed(0)
    keep = torch.rand(5, 5) > 0.4
    keep[2] = False                      # a query that keeps no key
    bias = torch.randn(2, 1, 5, 5)
    bias[1, 0, 3] = -float("inf")        # a row masked out entirely
    return {"module": module(), "inputs": (torch.randn(2, 5, 8), keep, bias)}


def dropped():
    return step(Dropped)
"""


def test_import_grouped_query_attention_repeats_each_key_and_value_head_as_torch(step_file, same_as_torch):
    path, _ = step_file(GQA)
    check(path, "step", same_as_torch)


def test_import_grouped_query_attention_with_dropout_drops_the_weights_of_every_query_head(step_file):
    path, _ = step_file(GQA)
    model = gradflow.load(f"{path}:dropped")
    report = gradflow.analyze(model)
    assert {report.status(p.name, "loss") for p in report.params} == {"flows"}
    weights = model.entries["scaled_dot_product_attention_weights"]
    assert weights.op.name == "dropout" and weights.value.shape == (2, 4, 5, 5)


@pytest.mark.parametrize("func", ["step", "dropped"])
def test_import_attention_with_a_query_that_keeps_no_key_is_finite_in_float32_as_in_float64(step_file, func):
    """A masked score's stand-in for -inf was -1e300, which is -inf in float32: the row masked out
    entirely was NaN there, and its NaN reached every gradient, where torch's float32 gives zeros."""
    path, _ = step_file(GQA)
    wide, narrow = (gradflow.analyze(gradflow.load(f"{path}:{func}", dtype=dtype)) for dtype in ("float64", "float32"))
    for loss, same in zip(wide.losses, narrow.losses):
        np.testing.assert_allclose(same.value, loss.value, rtol=1e-5, err_msg=loss.name)
        for param in ("q.weight", "q.bias", "kv.weight", "kv.bias"):
            np.testing.assert_allclose(narrow.grad(param, loss.name), wide.grad(param, loss.name), rtol=1e-3,
                                       atol=1e-3, err_msg=f"{loss.name} {param}")


UNCAPTURED = """
class Uncaptured(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 5)

    def forward(self, x, targets):
        logp = self.lin(x).log_softmax(-1)
        if targets.shape[1] == 3:
            return {"loss": F.ctc_loss(logp, targets, torch.tensor([6, 6]), torch.tensor([2, 3]))}  # @ctc
        return {"loss": F.gaussian_nll_loss(logp[..., :1], x[..., :1], logp[..., 1:2].exp())}  # @gaussian


def ctc():
    return {"module": Uncaptured(), "inputs": (torch.randn(6, 2, 3), torch.tensor([[1, 2, 0], [3, 1, 2]]))}


def gaussian():
    return {"module": Uncaptured(), "inputs": (torch.randn(6, 2, 3), torch.zeros(2, 2, dtype=torch.long))}
"""


@pytest.mark.parametrize("func, says", [
    ("ctc", "F.ctc_loss cannot be imported: torch.export cannot capture aten._ctc_loss"),
    ("gaussian", "F.gaussian_nll_loss with a tensor var cannot be imported: it checks that var is not negative"),
])
def test_losses_export_cannot_capture_are_refused_at_their_line_saying_why(step_file, func, says):
    """export's own words were 'DynamicOutputShapeException: aten._ctc_loss.Tensor' and, for the
    Gaussian loss's check of var, a general word about values."""
    path, line_of = step_file(UNCAPTURED)
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:{func}")
    assert caught.value.line == line_of(func) and caught.value.message.startswith(says)
