"""Each mapped aten op against PyTorch: a step using many ops at once, every gradient compared."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import gradflow  # noqa: E402
import numpy as np  # noqa: E402
from gradflow.importers import import_python  # noqa: E402

ZOO = """
class Zoo(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 6))
        self.b = nn.Parameter(torch.randn(6))
        self.conv = nn.Conv2d(2, 3, 3, stride=1, padding=1)
        self.ln = nn.LayerNorm(6)
        self.emb = nn.Embedding(5, 6)

    def forward(self, x, idx, img):
        h = torch.addmm(self.b, x, self.w)
        h2 = h.t().permute(1, 0).expand(2, 3, 6)
        y = torch.sigmoid(h)
        c = self.conv(img)
        return {
            "reduce": h.sum(dim=1, keepdim=True).mean() + h.amax(dim=0).sum() + h.max(dim=1).values.sum()
                      + h.var(dim=1).sum() + h.std() + torch.logsumexp(h, dim=1).sum() + h.norm(dim=1).sum()
                      + torch.linalg.vector_norm(h),
            "soft": F.softmax(h, dim=-1)[:, 0].sum() + F.log_softmax(h, dim=0).sum()
                    + F.nll_loss(F.log_softmax(h, dim=1), idx) + F.normalize(h, dim=-1)[:, 1].sum(),
            "losses": F.mse_loss(h, y.detach(), reduction="sum") + F.l1_loss(h, y.detach())
                      + F.binary_cross_entropy_with_logits(h, (y > 0.5).double())
                      + F.binary_cross_entropy(y, torch.ones_like(y) * 0.3)
                      + F.mse_loss(h, torch.zeros_like(h), reduction="none").sum(),
            "shape": torch.cat([self.ln(h2) + self.emb(idx)[None], h2], dim=-1).sum()
                     + torch.stack([h, h * 2]).pow(2).sum() + h[:, 1:5:2].sum() + h[1].sum()
                     + h[idx[:2]].sum() + h.gather(1, idx[:, None]).sum()
                     + sum(p.sum() * i for i, p in enumerate(h.split(4, dim=1)))
                     + sum(p.sum() * i for i, p in enumerate(h.chunk(3, dim=1)))
                     + sum(p.sum() * (i + 1) for i, p in enumerate(h.unbind(0)))
                     + (F.one_hot(idx, 5).double() * h[:, :5]).sum(),
            "conv": F.max_pool2d(c, 2).sum() + F.avg_pool2d(c, 2).sum() + F.adaptive_avg_pool2d(c, 1).sum()
                    + c.flatten(1).sum() + c.squeeze(0).unsqueeze(1).sum(),
            "elem": (h.masked_fill(h > 0.5, -3.0) + torch.where(h > 0, h, h * 0.1) + h.clamp(-0.5, 0.5)
                     + F.leaky_relu(h, 0.2) + F.elu(h) + F.softplus(h, beta=2) + F.hardtanh(h)
                     + torch.rsqrt(h.abs() + 1) + 1 / (h.abs() + 1) + h ** 3 + (2 - h)
                     + torch.div(h, 3, rounding_mode="floor") + h.sign() * h + F.silu(h) + torch.tanh(h)
                     + h.exp() + (h.abs() + 1).log() + F.relu(h) + torch.maximum(h, y) + torch.minimum(h, y)
                     + h.clamp_min(0.1) + h.round() + h.sin() + h.cos()).sum(),
        }


def step():
    torch.manual_seed(0)
    return {"module": Zoo(), "inputs": (torch.randn(3, 4), torch.tensor([1, 0, 4]), torch.randn(1, 2, 4, 4))}
"""


def test_import_mapped_ops_give_torch_autograd_gradients(step_file, same_as_torch):
    path, _ = step_file(ZOO)
    same_as_torch(gradflow.analyze(gradflow.load(f"{path}:step")), path, "step")


def test_import_multihead_attention_gives_torch_autograd_gradients(step_file, same_as_torch):
    path, _ = step_file("""
    class Attend(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, x):
            y, _ = self.attn(x, x, x, need_weights=False)
            return {"loss": y.square().mean()}


    def step():
        torch.manual_seed(0)
        return {"module": Attend(), "inputs": (torch.randn(2, 5, 8),)}
    """)
    same_as_torch(gradflow.analyze(gradflow.load(f"{path}:step")), path, "step")


def test_import_dead_relu_is_zero_as_torch_gives_zeros(step_file, same_as_torch):
    path, _ = step_file("""
    class Dead(nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden = nn.Linear(3, 4)
            self.out = nn.Linear(4, 1)
            with torch.no_grad():
                self.hidden.bias.fill_(-100.0)   # every unit dead on these inputs

        def forward(self, x):
            return {"loss": self.out(F.relu(self.hidden(x))).mean()}


    def step():
        torch.manual_seed(0)
        return {"module": Dead(), "inputs": (torch.randn(5, 3),)}
    """)
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    assert report.status("hidden.weight", "loss") == "zero"
    same_as_torch(report, path, "step")


def test_import_attention_with_boolean_and_float_masks_gives_torch_autograd_gradients(step_file, same_as_torch):
    path, _ = step_file("""
    class Masked(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(4, 12)
            self.register_buffer("keep", torch.rand(5, 5) > 0.3)

        def forward(self, x, bias):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            keep = self.keep | torch.eye(5, dtype=torch.bool)   # every query keeps a key
            boolean = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            additive = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3)
            return {"boolean": boolean.square().mean(), "additive": F.silu(additive).mean()}


    def step():
        torch.manual_seed(0)
        return {"module": Masked(), "inputs": (torch.randn(2, 5, 4), torch.randn(5, 5))}
    """)
    same_as_torch(gradflow.analyze(gradflow.load(f"{path}:step")), path, "step")


def test_import_two_tensor_max_and_min_are_elementwise_as_in_torch(step_file, same_as_torch):
    path, _ = step_file("""
    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.w2 = nn.Parameter(torch.randn(4))

        def forward(self, x):
            h = self.lin(x)
            tied = h.clamp(max=0.0)   # equal to h wherever h <= 0: torch splits the gradient there
            return {"high": (torch.max(h, self.w2) * h).sum() + torch.max(h, tied).square().sum(),
                    "low": torch.min(self.w2, h).exp().sum() + h.min(tied).sum() + h.max() + torch.min(h)}


    def step():
        torch.manual_seed(0)
        return {"module": Pair(), "inputs": (torch.randn(3, 4),)}
    """)
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    assert report.status("w2", "high") == "flows"
    same_as_torch(report, path, "step")


def test_import_var_and_std_honour_keepdim_and_correction_however_given(step_file, same_as_torch):
    path, _ = step_file("""
    class Whiten(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 5)

        def forward(self, x):
            h = self.lin(x)   # [3, 5]: keepdim lost would not broadcast, or broadcast wrongly
            z = (h - h.mean(1, keepdim=True)) / h.std(1, keepdim=True)
            return {"pos": z.square().sum() + (h / h.std(1, True, True)).sum() + (h * h.var(0, False, True)).sum()
                           + (h * torch.var(h, -1, unbiased=False, keepdim=True)).sum(),
                    "kw": (h * h.var(dim=1, keepdim=True)).sum() + (h * torch.var(h, dim=(0, 1), correction=2,
                                                                                keepdim=True)).sum()
                          + (h * h.var(keepdim=True)).sum() + h.std(unbiased=False) + h.var(0, False).sum()
                          + h.var(correction=0) + torch.std(h, dim=[0], correction=1.5).sum()}


    def step():
        torch.manual_seed(0)
        return {"module": Whiten(), "inputs": (torch.randn(3, 4),)}
    """)
    same_as_torch(gradflow.analyze(gradflow.load(f"{path}:step")), path, "step")



def test_import_std_of_equal_values_gives_zero_gradient_as_torch_not_nan(step_file, same_as_torch):
    path, _ = step_file("""
    class Norm(nn.Module):
        # the Annotated Transformer's LayerNorm: a padded (all-zero) row has std 0
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 5)
            self.gain = nn.Parameter(torch.ones(5))

        def forward(self, x, keep):
            h = self.lin(x) * keep
            std = h.std(-1, keepdim=True)
            s, m = torch.std_mean(h, dim=1)
            return {"layer": (self.gain * (h - h.mean(-1, keepdim=True)) / (std + 1e-6)).square().sum(),
                    "forms": (s * m).sum() + h[1].std() + h.std(0, unbiased=False).sum()
                             + torch.std(h, dim=1, correction=2).sum()}


    def step():
        torch.manual_seed(0)
        return {"module": Norm(), "inputs": (torch.randn(3, 4), torch.tensor([[1.0], [0.0], [1.0]]))}
    """)
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    assert not [f for f in report.findings if f.rule == "GF105"]
    same_as_torch(report, path, "step")


def test_import_hardtanh_and_relu6_pass_no_gradient_at_their_edges_as_torch(step_file, same_as_torch):
    path, _ = step_file("""
    class Edges(nn.Module):
        # values exactly at the edges (clipped weights of a binarised net): torch's hardtanh passes
        # no gradient there, where clamp passes it
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.tensor([-1.0, 1.0, 0.5, -2.0, 0.0, 6.0]))

        def forward(self, x):
            return {"hard": (F.hardtanh(self.w) * x).sum(), "six": (F.relu6(self.w) * x).sum(),
                    "narrow": (nn.Hardtanh(0.0, 0.5)(self.w) * x).sum(), "layer": (nn.ReLU6()(self.w) * x).sum(),
                    "clamped": (self.w.clamp(-1.0, 1.0) * x).sum()}


    def step():
        return {"module": Edges(), "inputs": (torch.arange(1.0, 7.0),)}
    """)
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    np.testing.assert_array_equal(report.grad("w", "hard"), [0, 0, 3, 0, 5, 0])
    same_as_torch(report, path, "step")


def test_import_clamp_with_tensor_bounds_gives_x_the_whole_gradient_at_a_bound_as_torch(step_file, same_as_torch):
    path, _ = step_file("""
    class Bounded(nn.Module):
        # w equal to its bound in the first two places (torch gives w all of it, not half as
        # maximum would), and a lower bound above the upper one in the last
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.tensor([0.0, 1.0, 0.5, -1.0, 3.0, 2.0]))
            self.lo = nn.Parameter(torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 2.5]))
            self.hi = nn.Parameter(torch.ones(6))

        def forward(self, x):
            return {"both": (torch.clamp(self.w, self.lo, self.hi) * x).sum(),
                    "low": (torch.clamp(self.w, min=self.lo) * x).sum(), "high": (self.w.clamp(max=self.hi) * x).sum()}


    def step():
        return {"module": Bounded(), "inputs": (torch.arange(1.0, 7.0),)}
    """)
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    np.testing.assert_array_equal(report.grad("w", "both"), [1, 2, 3, 0, 0, 0])
    same_as_torch(report, path, "step")

def test_import_var_of_too_few_values_for_its_correction_is_refused_at_the_line(step_file):
    path, line_of = step_file("""
    class One(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 1)

        def forward(self, x):
            return {"loss": self.lin(x).var(1).sum()}   # @var


    def step():
        return {"module": One(), "inputs": (torch.randn(3, 4),)}
    """)
    with pytest.raises(gradflow.ModelError) as e:
        gradflow.load(f"{path}:step")
    assert str(e.value).startswith(f"{path}:{line_of('var')}:")
    assert "correction=1" in str(e.value)


IGNORED = """
class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 5)

    def forward(self, x, y, pad, seq):
        h = self.lin(x)
        return {"pad": F.cross_entropy(h, pad, ignore_index=0),
                "hf": F.cross_entropy(h, y),
                "nll": F.nll_loss(F.log_softmax(h, dim=1), y, ignore_index=-100)
                       + F.nll_loss(F.log_softmax(h, dim=1), pad, ignore_index=4),
                "flat": F.cross_entropy(h.view(2, 3, 5).reshape(-1, 5), seq.view(-1), ignore_index=2),
                "unused": F.cross_entropy(h, pad, ignore_index=3)}


def step():
    torch.manual_seed(0)
    return {"module": Tagger(), "inputs": (torch.randn(6, 4), torch.tensor([1, -100, 4, -100, 0, 2]),
                                           torch.tensor([0, 0, 3, 1, 4, 0]), torch.tensor([[2, 1, 2], [0, 2, 4]]))}
"""


def test_import_cross_entropy_and_nll_leave_out_the_ignore_index_rows_as_torch(step_file, same_as_torch):
    path, _ = step_file(IGNORED)
    same_as_torch(gradflow.analyze(gradflow.load(f"{path}:step")), path, "step")


def test_import_cross_entropy_with_every_label_ignored_is_nan_with_no_gradient_as_torch(step_file, same_as_torch):
    path, line_of = step_file("""
    class Empty(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 5)

        def forward(self, x, y):
            return {"loss": F.cross_entropy(self.lin(x), y)}   # @ce


    def step():
        return {"module": Empty(), "inputs": (torch.randn(2, 4), torch.tensor([-100, -100]))}
    """)
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    assert np.isnan(report.losses[0].value)
    assert [(f.rule, f.line) for f in report.findings if f.severity == "error"] == [("GF105", line_of("ce"))]
    same_as_torch(report, path, "step")    # zeros: the statuses are zero


LABELS = """
class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x, y, tags):
        h = self.lin(x)                                     # [4, 3]
        seq = h.reshape(2, 2, 3).transpose(1, 2)            # [2, 3, 2]
        return {"plain": F.cross_entropy(h, y),
                "nll": F.nll_loss(F.log_softmax(h, dim=1), y, reduction="sum"),
                "smooth": F.cross_entropy(h, y, label_smoothing=0.1),
                "seq": F.cross_entropy(seq, tags, ignore_index=-1, reduction="none").sum()}


def step():
    torch.manual_seed(0)
    return {"module": Tagger(), "inputs": (torch.randn(4, 4), torch.tensor([0, 2, 1, 1]),
                                           torch.tensor([[0, 1], [2, 2]]))}
"""


@pytest.mark.parametrize("y,tags", [([0, -100, 2, 1], [[-1, 1], [2, -1]]), ([-100, 2, -100, 2], [[-1, -1], [0, 1]]),
                                    ([-100] * 4, [[-1, -1], [-1, -1]])])
def test_import_written_model_ignores_labels_the_example_never_had_as_torch(step_file, tmp_path, y, tags):
    """The model file holds no label values: the same file, given other labels (ignore_index
    among them), gives torch's losses and gradients on those labels."""
    from click.testing import CliRunner

    from gradflow.cli.main import cli
    from gradflow.importers.torch.target import load_step
    path, _ = step_file(LABELS)
    out = tmp_path / "tagger.yaml"
    assert CliRunner().invoke(cli, ["import", "torch", f"{path}:step", "-o", str(out)]).exit_code == 0
    arrays = dict(np.load(tmp_path / "tagger.npz"))
    arrays["y"], arrays["tags"] = np.array(y), np.array(tags)
    np.savez(tmp_path / "relabelled.npz", **arrays)
    report = gradflow.analyze(gradflow.load(out, weights=tmp_path / "relabelled.npz"))

    module = load_step(path, "step").module.double()
    losses = module(torch.tensor(arrays["x"]), torch.tensor(y), torch.tensor(tags))
    for loss in report.losses:
        np.testing.assert_allclose(loss.value, losses[loss.name].item(), rtol=1e-12, err_msg=loss.name)
        grads = torch.autograd.grad(losses[loss.name], list(module.parameters()), retain_graph=True)
        for (name, _), g in zip(module.named_parameters(), grads):
            assert report.status(name, loss.name) == ("flows" if g.any() else "zero"), (loss.name, name)
            np.testing.assert_allclose(report.grad(name, loss.name), g.numpy(), rtol=1e-9, atol=1e-15)


def test_import_rsub_alpha_and_avg_pool_divisor_override_give_torch_autograd_gradients(step_file, same_as_torch):
    path, _ = step_file("""
    class Args(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.w = nn.Parameter(torch.randn(4))
            self.conv = nn.Conv2d(1, 2, 3, padding=1)
            self.plain = nn.Conv2d(2, 2, 1)   # stride and padding left at their defaults

        def forward(self, x, img):
            h = self.lin(x)
            c = self.plain(self.conv(img))
            return {"rsub": (torch.rsub(h, self.w, alpha=2) * h).sum() + torch.rsub(h, 3.0, alpha=-0.5).square().sum()
                            + (1 - h).square().sum() + torch.rsub(h, self.w).sum(),
                    "pool": F.avg_pool2d(c, 2, divisor_override=1).square().sum()
                            + F.avg_pool2d(c, (2, 3), stride=1, divisor_override=4).square().sum()
                            + F.avg_pool2d(c, 2, divisor_override=None).square().sum()}


    def step():
        torch.manual_seed(0)
        return {"module": Args(), "inputs": (torch.randn(3, 4), torch.randn(2, 1, 4, 6))}
    """)
    same_as_torch(gradflow.analyze(gradflow.load(f"{path}:step")), path, "step")


def test_import_lerp_with_a_number_or_a_tensor_weight_and_in_place_gives_torch_autograd_gradients(
        step_file, same_as_torch):
    path, _ = step_file("""
    class Lerp(nn.Module):
        def __init__(self):
            super().__init__()
            self.online = nn.Linear(4, 3)
            self.target = nn.Linear(4, 3)
            self.w = nn.Parameter(torch.rand(3))

        def forward(self, x):
            with torch.no_grad():   # an EMA target network, as BYOL and DINO write it
                for t, o in zip(self.target.parameters(), self.online.parameters()):
                    t.lerp_(o, 0.1)
            h, g = self.online(x), self.target(x)
            return {"byol": (h - g).square().sum(),
                    "mix": torch.lerp(h, h.square(), self.w).sum() + torch.lerp(h, g, 0.75).pow(3).sum()}


    def step():
        torch.manual_seed(0)
        return {"module": Lerp(), "inputs": (torch.randn(5, 4),)}
    """)
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    assert report.status("target.weight", "byol") == "flows"   # the leaf keeps its gradient, as in torch
    same_as_torch(report, path, "step")


@pytest.mark.parametrize("code, says", [
    ("self.emb(torch.tensor([1, 1, 2])).sum() * x.sum()",
     "aten.embedding.default with scale_grad_by_freq=True"),
    ("F.softplus(x * 30, threshold=1.0).sum()", "aten.softplus.default with threshold=1.0"),   # x itself above it
])
def test_import_arguments_that_change_the_gradient_and_are_not_modelled_are_refused(step_file, code, says):
    path, line_of = step_file(f"""
    class Refused(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 1, 1)
            self.emb = nn.Embedding(5, 3, scale_grad_by_freq=True)

        def forward(self, x):
            x = self.conv(x)
            return {{"loss": {code}}}  # @here


    def step():
        return {{"module": Refused(), "inputs": (torch.randn(1, 1, 6, 6),)}}
    """)
    with pytest.raises(gradflow.ModelError) as e:
        gradflow.load(f"{path}:step")
    assert str(e.value).startswith(f"{path}:{line_of('here')}:")
    assert f"error: unsupported op {says}" in str(e.value)


def test_import_not_of_a_mask_and_casts_of_comparisons_give_torch_autograd_gradients(step_file, same_as_torch):
    path, _ = step_file("""
    class Masks(nn.Module):
        def __init__(self):
            super().__init__()
            self.qk = nn.Linear(4, 8)
            self.emb = nn.Embedding(2, 4)

        def forward(self, x, pad):
            q, k = self.qk(x).chunk(2, dim=-1)
            s = q @ k.transpose(-1, -2)
            causal = torch.ones(5, 5, dtype=torch.bool).tril()
            mask = causal & ~pad[:, None, :]           # the second row is all padding: every score masked
            s = s.masked_fill(~mask, -1e9).softmax(-1)
            h = s @ x
            pos = (h > 0).long()
            either = (h[..., 0] > 0) | pad
            return {"masked": (h * torch.logical_not(pad)[..., None]).square().sum() + (h[..., 1] * either).sum()
                              + (h[..., 2] * torch.logical_xor(h[..., 0] > 0, pad)).sum(),
                    "cast": (h * (h > 0).float()).sum() + (h * pos).sum() + self.emb(pos[..., 0]).sum()
                            + (h * (~(h < 0.1)).double()).sum()}


    def step():
        torch.manual_seed(0)
        pad = torch.tensor([[False, False, False, True, True], [True] * 5])
        return {"module": Masks(), "inputs": (torch.randn(2, 5, 4), pad)}
    """)
    same_as_torch(gradflow.analyze(gradflow.load(f"{path}:step")), path, "step")


def test_import_einsum_and_index_select_give_torch_autograd_gradients(step_file, same_as_torch):
    path, _ = step_file("""
    class Contract(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 3))
            self.q = nn.Parameter(torch.randn(2, 5, 4))

        def forward(self, x, idx):
            h = torch.einsum("bij,jk->bik", x, self.w)
            att = torch.einsum("bqd, bkd -> bqk", self.q, x)
            return {"mat": h.square().sum() + torch.einsum("bqk,bkd->bqd", att.softmax(-1), x).sum(),
                    "other": torch.einsum("...j,...j->...", x, self.q).sum()
                             + torch.einsum("ij,ik", self.w, self.w).sum()
                             + torch.einsum("bij->j", x * self.q).sum() + torch.einsum("ij,ij->", self.w, self.w)
                             + torch.einsum("i,j->ij", self.w[0], self.w[:, 1]).exp().sum(),
                    "select": self.w.index_select(0, idx).square().sum() + x.index_select(2, idx[0]).sum()
                              + torch.index_select(self.q, 1, idx).tanh().sum()}


    def step():
        torch.manual_seed(0)
        return {"module": Contract(), "inputs": (torch.randn(2, 5, 4), torch.tensor([3, 0, 3]))}
    """)
    same_as_torch(gradflow.analyze(gradflow.load(f"{path}:step")), path, "step")


def test_import_einsum_with_a_diagonal_is_refused_at_its_line(step_file):
    path, line_of = step_file("""
    class Diagonal(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 4))

        def forward(self, x):
            return {"loss": torch.einsum("ii,ij,jk->k", x, self.w, self.w).sum()}   # @diag


    def step():
        return {"module": Diagonal(), "inputs": (torch.randn(4, 4),)}
    """)
    with pytest.raises(gradflow.ModelError) as e:
        gradflow.load(f"{path}:step")
    assert str(e.value).startswith(f"{path}:{line_of('diag')}:"), str(e.value)
    assert "einsum" in str(e.value) and "repeated" in str(e.value)


@pytest.mark.parametrize("code, says", [
    ("a & b", "aten.__and__.Tensor beyond two boolean tensors"),
    ("(a > 1) | b", "aten.__or__.Tensor beyond two boolean tensors"),
    ("torch.logical_xor(a, b)", "aten.logical_xor.default beyond two boolean tensors"),
    ("~a", "aten.bitwise_not.default of an integer tensor"),   # -a - 1, not a mask's not
])
def test_import_bit_ops_of_integer_tensors_are_refused_at_their_line(step_file, code, says):
    path, line_of = step_file(f"""
    class Bits(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))

        def forward(self, a, b):
            return {{"loss": (self.w * ({code})).sum()}}   # @here


    def step():
        return {{"module": Bits(), "inputs": (torch.tensor([1, 2, 3]), torch.tensor([3, 2, 1]))}}
    """)
    with pytest.raises(gradflow.ModelError) as e:
        gradflow.load(f"{path}:step")
    assert str(e.value).startswith(f"{path}:{line_of('here')}:")
    assert f"error: unsupported op {says}" in str(e.value)


def test_import_cross_entropy_and_nll_with_smoothing_reductions_and_positions_give_torch_autograd_gradients(
        step_file, same_as_torch):
    path, _ = step_file("""
    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 5)

        def forward(self, x, y, tags):
            logits = self.lin(x)                   # [6, 5]
            seq = logits.reshape(2, 3, 5).transpose(1, 2)   # [2, 5, 3]: classes on axis 1
            return {"smooth": F.cross_entropy(logits, y, label_smoothing=0.1)
                              + F.cross_entropy(logits, y, label_smoothing=0.2, ignore_index=0),
                    "summed": F.cross_entropy(logits, y, reduction="sum")
                              + F.cross_entropy(logits, y, reduction="sum", ignore_index=2, label_smoothing=0.3),
                    "unreduced": (F.cross_entropy(logits, y, reduction="none") * torch.arange(6.0)).sum()
                            + F.cross_entropy(logits, y, reduction="none", ignore_index=1).max(),
                    "seq": F.cross_entropy(seq, tags, ignore_index=-1)
                           + F.cross_entropy(seq, tags, ignore_index=-1, reduction="none").sum()
                           + F.nll_loss(F.log_softmax(seq, 1), tags, reduction="sum", ignore_index=-1)
                           + F.nll_loss(F.log_softmax(logits, 1), y, reduction="none").square().mean(),
                    "all_ignored": F.cross_entropy(logits, torch.full((6,), -100), reduction="sum")
                                   + F.cross_entropy(seq, torch.full((2, 3), -100), reduction="none").sum()}


    def step():
        torch.manual_seed(0)
        return {"module": Tagger(), "inputs": (torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 4, 1]),
                                               torch.tensor([[1, -1, 4], [0, 0, -1]]))}
    """)
    same_as_torch(gradflow.analyze(gradflow.load(f"{path}:step")), path, "step")


def test_import_norms_without_affine_group_norm_and_padding_rows_give_torch_autograd_gradients(
        step_file, same_as_torch):
    path, _ = step_file("""
    class Norms(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 4, 3, padding=1)
            self.gn = nn.GroupNorm(2, 4)
            self.gn_plain = nn.GroupNorm(4, 4, affine=False)
            self.ln = nn.LayerNorm(4, elementwise_affine=False)
            self.ln2 = nn.LayerNorm([4, 4], bias=False)
            self.bn = nn.BatchNorm2d(4, affine=False)
            self.bn_eval = nn.BatchNorm1d(4, affine=False).eval()
            self.emb = nn.Embedding(5, 4, padding_idx=0)
            self.emb_last = nn.Embedding(5, 4, padding_idx=-1)
            with torch.no_grad():
                self.emb.weight[0] = 0.5        # a padding row need not be zero: its value is used as it is
                self.bn_eval.running_mean.uniform_()
                self.bn_eval.running_var.uniform_(0.5, 2.0)

        def forward(self, img, tokens, only_pad):
            c = self.conv(img)                  # [2, 4, 4, 4]
            e = self.emb(tokens)                # [2, 3, 4]
            return {"group": (self.gn(c) * c).sum() + self.gn_plain(c).exp().sum(),
                    "layer": (self.ln(e) * e).sum() + self.ln2(c).square().sum(),
                    "batch": (self.bn(c) * c).sum() + self.bn_eval(e.sum(1)).exp().sum(),
                    "pad": (e * e).sum() + self.emb_last(tokens).sum(),
                    "only_pad": self.emb(only_pad).square().sum()}


    def step():
        torch.manual_seed(0)
        return {"module": Norms(), "inputs": (torch.randn(2, 2, 4, 4), torch.tensor([[0, 1, 4], [4, 0, 0]]),
                                              torch.zeros(2, 2, dtype=torch.long))}
    """)
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    assert report.status("emb.weight", "only_pad") == "zero"
    same_as_torch(report, path, "step")


def test_import_padding_idx_is_embeddings_own_argument_not_a_stop_the_user_wrote(step_file, same_as_torch):
    path, line_of = step_file("""
    class Padded(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(5, 4, padding_idx=0)
            self.table = nn.Parameter(torch.randn(6, 4))

        def forward(self, tokens):
            e = self.emb(tokens)                                # @module
            f = F.embedding(tokens, self.table, padding_idx=-2)   # @function
            return {"loss": (e * f).sum()}


    def step():
        torch.manual_seed(0)
        return {"module": Padded(), "inputs": (torch.tensor([[0, 1, 4], [4, 0, 2]]),)}
    """)
    lines = {line.source.line: line.expr for line in import_python(f"{path}:step").graph}
    assert (lines[line_of("module")], lines[line_of("function")]) == (
        "embedding(tokens, emb.weight, padding_idx=0)", "embedding(tokens, table, padding_idx=4)")
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    assert report.stops == []       # no stop_gradient the user never wrote, no implicit equal at its line
    for name in ("emb.weight", "table"):
        pair = report.pair(name, "loss")
        assert (pair.status, pair.partially_cut_by, pair.counterfactual_norm) == ("flows", [], pair.norm)
    assert not report.grad("emb.weight", "loss")[0].any()
    same_as_torch(report, path, "step")


def test_import_var_mean_and_std_mean_give_torch_autograd_gradients(step_file, same_as_torch):
    path, _ = step_file("""
    class Stats(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 5)

        def forward(self, x):
            h = self.lin(x)
            v, m = torch.var_mean(h, 1, keepdim=True)
            s, m0 = torch.std_mean(h, dim=0, correction=0)
            va, ma = torch.var_mean(h)
            return {"whiten": ((h - m) / v.sqrt()).square().sum() + (h * s).sum() + (h * m0).sum(),
                    "all": va * ma + torch.std_mean(h, unbiased=False)[0]}


    def step():
        torch.manual_seed(0)
        return {"module": Stats(), "inputs": (torch.randn(3, 4),)}
    """)
    same_as_torch(gradflow.analyze(gradflow.load(f"{path}:step")), path, "step")


def test_import_the_same_tensor_under_two_loss_names_is_each_loss(step_file, same_as_torch):
    path, _ = step_file("""
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 2)

        def forward(self, x):
            loss = self.lin(x).square().mean()
            return {"total": loss, "recon": loss, "other": self.lin(x).sum()}


    def step():
        torch.manual_seed(0)
        return {"module": Twice(), "inputs": (torch.randn(3, 4),)}
    """)
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    assert report.status("lin.weight", "recon") == "flows"
    same_as_torch(report, path, "step")


def test_import_masked_fill_with_minus_inf_is_exact_and_a_fully_masked_row_is_nan_as_in_torch(
        step_file, same_as_torch):
    body = """
    class Pad(nn.Module):
        def __init__(self):
            super().__init__()
            self.qk = nn.Linear(4, 8)

        def forward(self, x, pad):
            q, k = self.qk(x).chunk(2, dim=-1)
            s = (q @ k.transpose(-1, -2)).masked_fill(pad[:, None, :], float("-inf"))
            t = torch.where(pad[:, None, :], float("inf"), s).neg().softmax(-1)
            return {"loss": (s.softmax(-1) @ x).sum() + (t @ x).square().sum()
                            + self.qk(x).clamp(max=float("inf")).sum()}


    def step():
        torch.manual_seed(0)
        return {"module": Pad(), "inputs": (torch.randn(2, 3, 4), torch.tensor([[False, False, True], %s]))}
    """
    path, _ = step_file(body % "[True, False, True]")
    same_as_torch(gradflow.analyze(gradflow.load(f"{path}:step")), path, "step")
    path, _ = step_file(body % "[True, True, True]", "all_masked.py")   # torch: softmax of only -inf is nan
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    assert np.isnan(report.losses_by_name["loss"].value)
    assert any(f.rule == "GF105" for f in report.findings)


def test_import_attention_with_a_query_whose_keys_are_all_masked_gives_zeros_as_torch(step_file, same_as_torch):
    path, _ = step_file("""
    class Padded(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(4, 12)

        def forward(self, x, keep, rows):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            by_key = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, :])   # batch 1: no key
            by_row = F.scaled_dot_product_attention(q, k, v, attn_mask=rows, scale=0.5)    # query 0: no key
            bias = self.qkv.bias[:9].reshape(3, 3).masked_fill(~rows, float("-inf"))   # learned, row 0 all -inf
            additive = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            return {"keys": by_key.square().sum() + by_key.sum(), "rows": (by_row * x).sum(),
                    "additive": (additive * x).sum()}


    def step():
        torch.manual_seed(0)
        keep = torch.tensor([[True, False, True], [False, False, False]])
        rows = torch.tensor([[False, False, False], [True, False, True], [True, True, False]])
        return {"module": Padded(), "inputs": (torch.randn(2, 3, 4), keep, rows)}
    """)
    same_as_torch(gradflow.analyze(gradflow.load(f"{path}:step")), path, "step")
