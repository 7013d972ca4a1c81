"""a // b, torch.floor_divide and torch.div(a, b, rounding_mode="floor" or "trunc") imported from
training steps, against torch.autograd parameter by parameter in float64 and in float32: integer
quotients (pos // stride) that index an embedding and a gather, negative operands, a tensor
divisor of either sign, a number divided by a tensor, an in-place //=, sign and sgn of integers
as indices; a quantisation step whose float quotients are whole but for a rounding (w // 0.1 is
torch's 9.0 where floor(w / 0.1) is 10.0), divisors of 0 (+-inf, NaN); torch's zero gradient
through a rounding division as an implicit cut; an integer divisor of 0 as one located error."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import gradflow  # noqa: E402
from gradflow.importers import import_python  # noqa: E402
from gradflow.importers.torch.target import load_step  # noqa: E402
from tests.importers.conftest import check, same_values_as_torch  # noqa: E402
from tests.importers.test_torch_math_ops import BY_ZERO as REMAINDER_BY_ZERO  # noqa: E402
from tests.importers.test_torch_refusals import run_cli  # noqa: E402

STRIDED = """
class Strided(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(9, 3)
        self.proj = nn.Linear(3, 4)

    def forward(self, pos, d):
        cell = pos // 3                                                # pos // stride
        h = self.proj(self.emb(cell))
        picked = torch.gather(h, 1, (pos.unsqueeze(1) // 5).clamp(max=3))
        back = torch.div(pos - 10, 4, rounding_mode="floor") + 4      # -2.5 -> -3
        toward = torch.div(pos - 10, 4, rounding_mode="trunc") + 4    # -2.5 -> -2
        by = torch.floor_divide(pos + 5, d) + 4                       # d of either sign
        cut = torch.div(pos + 5, d, rounding_mode="trunc") + 4
        wrap = (20 // (pos + 1)).clamp(max=8)                         # a number by a tensor
        k = pos.clone()
        k //= 4
        side = torch.sign(pos - 6) + 1
        ratio = pos // 2.5                                            # a float quotient
        rows = (self.emb(back) * 2 + self.emb(toward) * 3 + self.emb(by) * 4 + self.emb(cut) * 5
                + self.emb(wrap) * 6 + self.emb(k) * 7 + self.emb(side) * 8 + self.emb(torch.sgn(pos - 6) + 1) * 9)
        return {"loss": h.sum() + picked.sum() + rows.sum() + (ratio * h[:, 0]).sum()}


def step():
    torch.manual_seed(0)
    return {"module": Strided(), "inputs": (torch.tensor([0, 3, 7, 12, 15, 19, 25]),
                                            torch.tensor([2, -3, 4, 5, -8, 7, 9]))}
"""


def test_integer_floor_and_trunc_quotients_index_an_embedding_and_a_gather_as_in_torch(step_file, same_as_torch):
    path, _ = step_file(STRIDED)
    check(path, "step", same_as_torch)
    spec = import_python(f"{path}:step")
    exprs = [line.expr for line in spec.graph]
    assert "floor_divide(pos, 3)" in exprs and "floor_divide(pos, 2.5)" in exprs
    assert any(e.startswith("floor_divide(20, ") for e in exprs)
    assert sum(e.startswith("trunc_divide(") for e in exprs) == 2 and sum(e.startswith("sign(") for e in exprs) == 2
    model = gradflow.load(f"{path}:step")
    gradflow.analyze(model)
    kinds = {line.expr: model.entries[line.targets[0]].value.dtype.kind for line in spec.graph
             if line.expr.startswith(("floor_divide(", "trunc_divide(", "sign("))}
    assert kinds.pop("floor_divide(pos, 2.5)") == "f" and set(kinds.values()) == {"i"}


QUANTISE = """
class Quantiser(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.scale = nn.Parameter(torch.tensor(0.1))
        # quotients by 0.1 that are whole but for a rounding
        self.w = nn.Parameter(torch.tensor([1.0, -1.0, 0.3, 0.7, 2.7, -1.1, 0.5, 3.0], dtype=torch.float64))
        self.zero = nn.Parameter(torch.tensor([0.0, -0.0, 0.0]))

    def forward(self, x):
        s, weight, w = self.scale, self.lin.weight, self.w
        codes = torch.div(weight, s, rounding_mode="floor")
        q = weight + (codes * s - weight).detach()                  # straight-through
        tenths = torch.div(w, 0.1, rounding_mode="floor")
        toward = torch.div(w, -0.1, rounding_mode="trunc")
        n = torch.arange(1.0, 9.0)
        return {"task": F.linear(x, q, self.lin.bias).pow(2).mean(),
                "scaled": (codes * s).sum(),                             # the scale's gradient: the codes
                "tenths": (tenths * n).sum() + (toward * n * n).sum() + (tenths * w).sum() + (toward * w).sum(),
                "by_zero": (torch.div(w[:3] * torch.tensor([1.0, 0.0, -1.0]), self.zero, rounding_mode="floor")
                            * n[:3]).sum()                                 # inf, 0 / -0: NaN, -inf
                           + (torch.div(w[3:6], self.zero, rounding_mode="trunc") * w[3:6]).sum(),
                "codes": codes.sum()}                                    # torch: zeros


def step():
    torch.manual_seed(0)
    return {"module": Quantiser(), "inputs": (torch.randn(5, 4),)}
"""


def entry_value(model, spec, expr):
    return model.entries[next(line.targets[0] for line in spec.graph if line.expr == expr)].value


def same_as_torch_but_cut(report, path: str, losses) -> None:
    """As same_as_torch, but where torch's gradient is zeros only because it passed a rounding
    division, gradflow's pair is blocked by that implicit cut."""
    module = load_step(path, "step").module.double()
    params = dict(module.named_parameters())
    values = module(*[t.double() if t.dtype.is_floating_point else t for t in load_step(path, "step").inputs])
    for loss in losses:
        grads = torch.autograd.grad(values[loss], list(params.values()), allow_unused=True, retain_graph=True)
        for name, g in zip(params, grads):
            pair = report.pair(name, loss)
            if g is not None and g.any():
                np.testing.assert_allclose(report.grad(name, loss), g.numpy(), rtol=1e-12, err_msg=f"{loss} {name}")
            elif g is not None:
                assert pair.status == "blocked", (loss, name, pair.status)
                assert {c.op for c in pair.cut_by} <= {"floor_divide", "trunc_divide"} and pair.cut_by
            else:
                assert pair.status == "unreachable", (loss, name, pair.status)


def test_a_quantisation_step_floors_as_torch_does_and_passes_torchs_gradient(step_file, same_as_torch):
    path, _ = step_file(QUANTISE)
    model = gradflow.load(f"{path}:step")
    report = gradflow.analyze(model)
    same_values_as_torch(report, path, "step")
    same_as_torch(report, path, "step", only={"task", "tenths"})
    same_as_torch_but_cut(report, path, ["scaled", "by_zero", "codes"])
    assert report.grad("scale", "scaled") == entry_value(model, import_python(f"{path}:step"),
                                                          "floor_divide(lin.weight, scale)").sum()
    spec = import_python(f"{path}:step")
    w = torch.tensor([1.0, -1.0, 0.3, 0.7, 2.7, -1.1, 0.5, 3.0], dtype=torch.float64)
    tenths, toward = entry_value(model, spec, "floor_divide(w, 0.1)"), entry_value(model, spec, "trunc_divide(w, -0.1)")
    assert tenths.tolist() == (w // 0.1).tolist() == [9.0, -10.0, 2.0, 6.0, 27.0, -12.0, 4.0, 29.0]
    assert toward.tolist() == torch.div(w, -0.1, rounding_mode="trunc").tolist()
    assert np.floor(w.numpy() / 0.1).tolist() != tenths.tolist()      # the naive form would differ
    assert np.isnan(report.losses_by_name["by_zero"].value)          # as torch's
    assert report.grad("w", "by_zero")[3:6].tolist() == [np.inf, -np.inf, -np.inf]   # trunc(w / +-0)
    for param in ("scale", "lin.weight"):                           # torch's gradient: zeros
        pair = report.pair(param, "codes")
        assert pair.status == "blocked" and [(c.op, c.kind) for c in pair.cut_by] == [("floor_divide", "implicit")]


FLOORED = """
class Floored(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([1.0, -2.5, 0.3]))
        self.s = nn.Parameter(torch.tensor(0.1))

    def forward(self, x):
        return {"loss": ((self.w // self.s) * self.w).sum() + (self.w * x).sum()}


def step():
    torch.manual_seed(0)
    return {"module": Floored(), "inputs": (torch.randn(3),)}
"""


def test_floor_divide_of_a_tensor_that_trains_is_cut_where_torch_refuses_its_backward(step_file):
    path, _ = step_file(FLOORED)
    step = load_step(path, "step")
    with pytest.raises(RuntimeError, match="derivative for aten::floor_divide is not implemented"):
        step.module(*step.inputs)["loss"].backward()
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    same_values_as_torch(report, path, "step")
    assert report.status("s", "loss") == "blocked"
    assert [(c.op, c.kind) for c in report.pair("s", "loss").cut_by] == [("floor_divide", "implicit")]
    w = step.module.w.detach().double()
    np.testing.assert_allclose(report.grad("w", "loss"), (w // 0.1 + step.inputs[0].double()).numpy(), rtol=1e-12)


BY_ZERO = REMAINDER_BY_ZERO + """

class Floored(ByZero):
    def forward(self, ids, d):
        return {"loss": self.emb(ids // d).sum()}  # @floor


def floored():
    return step() | {"module": Floored()}


class Trunc(ByZero):
    def forward(self, ids, d):
        return {"loss": self.emb(torch.div(ids, 0, rounding_mode="trunc")).sum()}  # @trunc


def trunc():
    return step() | {"module": Trunc()}


class Floor(ByZero):
    def forward(self, ids, d):
        return {"loss": self.emb(torch.div(ids + 1, d, rounding_mode="floor")).sum()}  # @mode


def floor():
    return step() | {"module": Floor()}
"""


@pytest.mark.parametrize("func, marker, col, what", [
    ("floored", "floor", 34, "floor division"), ("trunc", "trunc", 34, "trunc division"),
    ("floor", "mode", 34, "floor division"),
])
def test_an_integer_divided_by_zero_is_one_located_error(step_file, func, marker, col, what):
    path, line_of = step_file(BY_ZERO)
    result = run_cli("check", f"{path}:{func}")
    assert result.exit_code == 2
    assert result.stderr == (f"{path}:{line_of(marker)}:{col}: error: {what} of an integer tensor by 0 "
                             "(torch raises ZeroDivisionError)\n")
    assert "Traceback" not in result.output


@pytest.mark.parametrize("body", [STRIDED, QUANTISE], ids=["strided", "quantise"])
def test_rounding_divisions_run_in_float32_as_torch_runs_them_in_float32(step_file, body):
    """Against torch in float32 itself: 0.3 // 0.1 is 3.0 there, 2.0 in float64."""
    path, _ = step_file(body)
    code = run_cli("check", f"{path}:step").exit_code
    assert code != 2 and run_cli("check", f"{path}:step", "--dtype", "float32").exit_code == code
    ours = gradflow.analyze(gradflow.load(f"{path}:step", dtype="float32"))
    step = load_step(path, "step")
    module = step.module.float()
    params = dict(module.named_parameters())
    for loss, value in module(*[t.float() if t.dtype.is_floating_point else t for t in step.inputs]).items():
        assert ours.losses_by_name[loss].value == pytest.approx(value.item(), rel=1e-5, nan_ok=True)
        grads = torch.autograd.grad(value, list(params.values()), allow_unused=True, retain_graph=True)
        for name, g in zip(params, grads):
            mine = ours.grad(name, loss)
            if g is None or not g.any():   # none, or torch's zeros through a rounding division
                assert mine is None or not mine.any(), (loss, name)
                continue
            assert mine is not None and mine.dtype == np.float32, (loss, name)
            np.testing.assert_allclose(mine, g.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"{loss} {name}")
