"""torch.linalg's inverses, determinants, solves and Cholesky factors imported from training steps,
against torch.autograd parameter by parameter in float64 and close to it in float32: each op,
batched, the older spellings (torch.inverse, torch.cholesky, torch.triangular_solve), cholesky_solve
and cholesky_inverse; slogdet's sign as a cut, a negative determinant (sign -1, logdet NaN), a
singular one (det's zero gradient); Glow's invertible 1x1 convolution and a Gaussian process's
negative log marginal likelihood as real steps; and a singular matrix, one that is not
positive-definite and solve's left=False as one located error each."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
# EACH calls the older torch.cholesky and torch.triangular_solve, which warn when torch runs them
pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:torch.(cholesky|triangular_solve) is deprecated")]

from tests.importers.conftest import check, close_in_float32  # noqa: E402
from tests.importers.test_torch_refusals import run_cli  # noqa: E402


EACH = """
class Linalg(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Parameter(torch.randn(3, 3) + 3 * torch.eye(3))
        self.batch = nn.Parameter(torch.randn(2, 3, 3) + 3 * torch.eye(3))
        self.f = nn.Parameter(torch.randn(2, 3, 4))
        self.b = nn.Parameter(torch.randn(3, 2))

    def forward(self, v):
        a, batch, b = self.a, self.batch, self.b
        w = torch.arange(1.0, 10.0).reshape(3, 3)              # so that no sum hides an entry's gradient
        spd = self.f @ self.f.mT + torch.eye(3)                # a batch of two
        low = torch.linalg.cholesky(spd)
        return {"inverses": (torch.linalg.inv(a) * w).sum() + (torch.inverse(batch) * w).sum(),
                "dets": torch.det(a) + (torch.linalg.det(batch) * torch.tensor([1.0, -2.0])).sum(),
                "slogdets": torch.linalg.slogdet(batch)[1].sum() * 3 + torch.slogdet(a).logabsdet,
                "logdets": torch.logdet(spd).sum() + torch.logdet(a),
                "solves": (torch.linalg.solve(a, b) * w[:, :2]).sum() + (torch.linalg.solve(batch, v) * v).sum()
                         + torch.linalg.solve(batch, v[0]).sum() + torch.linalg.solve(batch, b).sum(),
                "factors": (low * w).sum() + (torch.linalg.cholesky(spd, upper=True) * w).sum()
                            + (torch.cholesky(spd[0]) * w.mT).sum(),
                "triangular": (torch.linalg.solve_triangular(batch, b, upper=True) * w[:, 1:]).sum()
                              + torch.linalg.solve_triangular(a, b.mT, upper=False, left=False).sum()
                              + (torch.linalg.solve_triangular(batch, b, upper=False, unitriangular=True) ** 2).sum()
                              + torch.triangular_solve(b, a, upper=False, transpose=True)[0].sum(),
                "cholesky_solves": (torch.cholesky_solve(b, low) * w[:, :2]).sum()
                                  + torch.cholesky_solve(b, low.mT, upper=True).sum()
                                  + (torch.cholesky_inverse(low[1]) * w).sum()
                                  + torch.cholesky_inverse(low[0].mT, upper=True).sum()
                                  # a [2, 2] right side beside two 2x2 factors: a matrix, though solve
                                  # would take it for a batch of vectors
                                  + (torch.cholesky_solve(b[:2], low[:, :2, :2]) * w[:2, :2]).sum()}


def step():
    torch.manual_seed(1)
    return {"module": Linalg(), "inputs": (torch.randn(2, 3),)}
"""


def test_import_each_linear_algebra_op_gives_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(EACH)
    report = check(path, "step", same_as_torch)
    assert {report.status(p.name, "triangular") for p in report.params} == {"flows", "unreachable"}


SIGNS = """
class Signs(nn.Module):
    def __init__(self):
        super().__init__()
        self.negative = nn.Parameter(torch.tensor([[0.0, 2.0], [1.5, 0.5]]))     # det -3
        self.pos = nn.Parameter(torch.tensor([[2.0, 0.5], [0.5, 1.0]]))
        self.flat = nn.Parameter(torch.tensor([[1.0, 2.0], [2.0, 4.0]]))    # singular
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        sign, logabsdet = torch.linalg.slogdet(self.negative)
        h = self.lin(x)
        return {"log_abs": logabsdet * 2 + sign,
                "signs": sign * 3 + torch.slogdet(torch.stack([self.pos, self.negative])).sign.sum(),
                "log_det": torch.logdet(self.negative) + torch.logdet(self.pos),
                "batch": torch.logdet(torch.stack([self.pos, self.negative])).sum(),
                "singular": torch.det(self.flat) * 2 + torch.linalg.det(h.mT @ h)}


def step():
    torch.manual_seed(0)
    return {"module": Signs(), "inputs": (torch.randn(4, 2),)}
"""


def test_import_negative_and_zero_determinants_as_torch(step_file, same_as_torch):
    """slogdet's sign is -1 and passes no gradient (torch's has none); logdet is NaN there, its
    gradient 0, as torch's where gives; det's gradient at a singular matrix is torch's 0."""
    path, _ = step_file(SIGNS)
    report = check(path, "step", same_as_torch)
    values = {loss.name: loss.value for loss in report.losses}
    assert values["signs"] == -3.0 and np.isnan(values["log_det"]) and np.isnan(values["batch"])
    assert {report.status(p, "signs") for p in ("negative", "pos")} == {"blocked"}
    assert report.status("negative", "log_det") == "zero" and report.status("pos", "log_det") == "flows"
    assert report.status("flat", "singular") == "zero"


GLOW = """
class InvertibleConv(nn.Module):
    \"\"\"Glow's invertible 1x1 convolution and an actnorm before it, under a Gaussian prior: the
    log-determinant is h * w * log |det W| (and the actnorm's).\"\"\"
    def __init__(self, c=4):
        super().__init__()
        torch.manual_seed(0)
        self.loc = nn.Parameter(torch.zeros(1, c, 1, 1))
        self.log_scale = nn.Parameter(torch.zeros(1, c, 1, 1) + 0.1)
        q, _ = torch.linalg.qr(torch.randn(c, c))
        self.weight = nn.Parameter(q)

    def forward(self, x):
        n, c, h, w = x.shape
        y = (x + self.loc) * self.log_scale.exp()
        z = F.conv2d(y, self.weight.view(c, c, 1, 1))
        log_det = h * w * torch.slogdet(self.weight)[1] + h * w * self.log_scale.sum()
        prior = -0.5 * (z ** 2).sum() / n
        return {"nll": -(prior + log_det) / (c * h * w)}


def step():
    torch.manual_seed(1)
    return {"module": InvertibleConv(), "inputs": (torch.randn(2, 4, 5, 5),)}
"""

GP = """
class GaussianProcess(nn.Module):
    \"\"\"Exact GP regression: the negative log marginal likelihood of y under an RBF kernel.\"\"\"
    def __init__(self):
        super().__init__()
        self.log_length = nn.Parameter(torch.tensor([0.2, -0.1]))
        self.log_scale = nn.Parameter(torch.tensor(0.3))
        self.log_noise = nn.Parameter(torch.tensor(-1.5))

    def forward(self, x, y):
        z = x / self.log_length.exp()
        d2 = (z[:, None, :] - z[None, :, :]).pow(2).sum(-1)
        k = self.log_scale.exp() * torch.exp(-0.5 * d2) + self.log_noise.exp() * torch.eye(x.shape[0])
        low = torch.linalg.cholesky(k)
        alpha = torch.cholesky_solve(y[:, None], low)
        fit = 0.5 * (y[:, None] * alpha).sum()
        return {"nll": fit + low.diagonal().log().sum() + 0.5 * x.shape[0] * math.log(2 * math.pi)}


def step():
    torch.manual_seed(0)
    x = torch.randn(7, 2)
    return {"module": GaussianProcess(), "inputs": (x, torch.sin(3 * x[:, 0]) + 0.1 * torch.randn(7))}
"""


@pytest.mark.parametrize("body", [GLOW, "import math\n" + GP], ids=["glow", "gp"])
def test_import_glow_and_a_gaussian_process_give_torch_gradients(step_file, same_as_torch, body):
    path, _ = step_file(body)
    report = check(path, "step", same_as_torch)
    assert {report.status(p.name, "nll") for p in report.params} == {"flows"}
    assert run_cli("check", f"{path}:step").exit_code == 0


@pytest.mark.parametrize("body", [EACH, SIGNS, GLOW, "import math\n" + GP], ids=["each", "signs", "glow", "gp"])
def test_imported_linear_algebra_runs_in_float32_close_to_torch(step_file, body):
    close_in_float32(step_file(body)[0])


REFUSED = """
class Refused(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(WEIGHT))

    def forward(self, x):
        w = self.w
        return {"loss": (CALL * x).sum()}  # @call


def step():
    return {"module": Refused(), "inputs": (torch.ones(2, 2),)}
"""

FLAT, NOT_PD = [[1.0, 2.0], [2.0, 4.0]], [[1.0, 2.0], [2.0, 1.0]]


def refused_at_the_call(step_file, call: str, w, message: str) -> None:
    """REFUSED calling ``call`` on a parameter of value ``w`` (a list, or its text) is one error, at the call."""
    path, line_of = step_file(REFUSED.replace("WEIGHT", w if isinstance(w, str) else repr(w)).replace("CALL", call))
    result = run_cli("check", f"{path}:step")
    assert result.exit_code == 2
    assert result.stderr == f"{path}:{line_of('call')}:26: error: {message}\n"
    assert "Traceback" not in result.output


@pytest.mark.parametrize("call, w, message", [
    ("torch.linalg.inv(w)", FLAT, "inv of a singular matrix (torch raises LinAlgError)"),
    ("torch.inverse(torch.stack([w + 3 * torch.eye(2), w]))[1]", FLAT,
     "inv of a singular matrix at batch element 1 (torch raises LinAlgError)"),
    ("torch.linalg.solve(w, x)", FLAT, "solve with a singular matrix a (torch raises LinAlgError)"),
    ("torch.linalg.cholesky(torch.stack([w @ w.mT + torch.eye(2), w]))[0]", NOT_PD,
     "cholesky of a matrix that is not positive-definite at batch element 1: its leading minor of order 2 is not "
     "(torch raises LinAlgError)"),
])
def test_what_torch_raises_for_is_one_located_error(step_file, call, w, message):
    """torch raises LinAlgError on the step's own numbers; gradflow says why at the user's line."""
    with pytest.raises(torch.linalg.LinAlgError):
        eval(call, {"torch": torch, "w": torch.tensor(w), "x": torch.ones(2, 2)})
    refused_at_the_call(step_file, call, w, message)


def test_solve_from_the_right_is_refused_saying_what_to_write(step_file):
    refused_at_the_call(step_file, "torch.linalg.solve(w, x, left=False)", NOT_PD,
                        "unsupported op aten.linalg_solve.default with left=False: write "
                        "torch.linalg.solve(A.mT, B.mT).mT instead")
