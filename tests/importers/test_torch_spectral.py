"""torch.linalg's spectral decompositions imported from training steps, against torch.autograd
parameter by parameter in float64 and close to it in float32: eigh and eigvalsh, svd (and torch.svd,
full_matrices's extra columns), svdvals, the nuclear and spectral norms, qr, pinv and pinverse,
matrix_exp, inv_ex and cholesky_ex, each through losses that do not depend on the vectors' signs
(which torch does not determine); real steps: spectral-norm and nuclear-norm penalties, an
orthogonal parametrisation by QR, PCA (ZCA) whitening by eigh, a Procrustes alignment by svd; torch's
NaN gradient at a repeated eigenvalue; and what torch cannot differentiate, or raises for, or sets
info for, as one located error each."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:.*nuclear_norm is deprecated")]

from tests.importers.conftest import check, close_in_float32  # noqa: E402
from tests.importers.test_torch_linalg import REFUSED, refused_at_the_call  # noqa: E402
from tests.importers.test_torch_refusals import run_cli  # noqa: E402


EACH = """
class Spectral(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.tall = nn.Parameter(torch.randn(2, 5, 3))
        self.wide = nn.Parameter(torch.randn(3, 4))
        self.sq = nn.Parameter(torch.randn(4, 4))
        self.small = nn.Parameter(torch.randn(3, 3) * 0.5)

    def forward(self, x):
        tall, wide, sq = self.tall, self.wide, self.sq
        w = torch.arange(1.0, 26.0).reshape(5, 5) / 10       # weights no vector's sign changes when squared
        sym = sq + sq.mT
        spd = sq @ sq.mT + torch.eye(4)
        evals, evecs = torch.linalg.eigh(torch.stack([sym, spd]))
        u, s, vh = torch.linalg.svd(tall, full_matrices=False)
        u_full, _, _ = torch.linalg.svd(tall[0])            # full_matrices=True by default: u is 5 x 5
        u_old, s_old, v_old = torch.svd(wide)
        q, r = torch.linalg.qr(tall)
        q_wide, r_wide = torch.linalg.qr(wide, mode="complete")   # complete: reduced, for a wide matrix
        low, info = torch.linalg.cholesky_ex(spd, upper=True)
        inverse, inv_info = torch.linalg.inv_ex(sq)
        return {"eigh": (evals * torch.tensor([1.0, -2.0, 0.5, 3.0])).sum() + (evecs ** 2 * w[:4, :4]).sum()
                        + torch.linalg.eigvalsh(sym, UPLO="U")[-1],
                "svd": (u ** 2 * w[:, :3]).sum() + (s * torch.tensor([1.0, 2.0, -1.0])).sum()
                       + (vh ** 2 * w[:3, :3]).sum() + (u_full[:, :3] ** 2 * w[:, :3]).sum()
                       + (u_old ** 2).sum(-1).mul(w[0, :3]).sum() + (v_old ** 2 * w[:4, :3]).sum() + s_old.sum()
                       + torch.linalg.svdvals(x @ wide).sum(),
                "complement": (u_full[:, 3:] @ u_full[:, 3:].mT * w).sum(),   # torch gives it no gradient
                "norms": torch.linalg.matrix_norm(tall, ord="nuc").sum() + torch.linalg.norm(wide, ord=2)
                         + (torch.linalg.matrix_norm(tall, ord=-2, dim=(0, 2), keepdim=True) * w[:1, :, None]).sum()
                         + torch.norm(wide, p="nuc") + torch.nuclear_norm(sq, dim=(1, 0), keepdim=True).sum()
                         + torch.linalg.norm(sq, ord="nuc"),
                "qr": (q * w[:, :3]).sum() + (r * w[:3, :3]).sum() + (q_wide * w[:3, :3]).sum()
                      + (r_wide * w[:3, :4]).sum(),
                "pinv": (torch.linalg.pinv(tall) * w[:3]).sum() + torch.linalg.pinv(wide, atol=0.1).sum()
                        + torch.linalg.pinv(wide, rtol=0.01).sum() + torch.linalg.pinv(spd, hermitian=True).sum()
                        + (torch.pinverse(sq, 1e-3) * w[:4, :4]).sum() + torch.linalg.pinv(sq, rcond=0.01)[0, 1],
                "exponential": (torch.linalg.matrix_exp(self.small) * w[:3, :3]).sum()
                               + torch.matrix_exp(self.small * 3).sum(),
                "ex": (low * w[:4, :4]).sum() + (inverse * w[1:, 1:]).sum() + info.sum() + inv_info}


def step():
    torch.manual_seed(1)
    return {"module": Spectral(), "inputs": (torch.randn(6, 3),)}
"""


def test_import_each_spectral_op_gives_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(EACH)
    report = check(path, "step", same_as_torch)
    assert report.status("tall", "complement") == "zero"
    assert {report.status(p, "exponential") for p in ("tall", "small")} == {"unreachable", "flows"}


REGULARIZED = """
class Regularized(nn.Module):
    \"\"\"A classifier whose weights' largest singular values are held down (spectral-norm
    regularization, by svdvals) and whose embedding is pushed to low rank (a nuclear-norm penalty).\"\"\"
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Parameter(torch.randn(6, 4))
        self.fc1, self.fc2 = nn.Linear(4, 5), nn.Linear(5, 3)

    def forward(self, x, y):
        logits = self.fc2(torch.relu(self.fc1(x @ self.embed)))
        spectral = sum(torch.linalg.svdvals(m.weight)[0] ** 2 for m in (self.fc1, self.fc2))
        nuclear = torch.linalg.matrix_norm(self.embed, ord="nuc")
        return {"loss": F.cross_entropy(logits, y) + 0.01 * spectral + 0.001 * nuclear,
                "lipschitz": torch.linalg.matrix_norm(self.fc1.weight, ord=2) * torch.linalg.norm(self.fc2.weight, 2)}


def step():
    torch.manual_seed(1)
    return {"module": Regularized(), "inputs": (torch.randn(8, 6), torch.randint(0, 3, (8,)))}
"""

ORTHOGONAL = """
class Orthogonal(nn.Module):
    \"\"\"A layer kept orthogonal by a QR parametrisation: w = q * sign(diag r), the Q whose R has a
    positive diagonal (unique, so the layer does not flip with LAPACK's signs).\"\"\"
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.raw = nn.Parameter(torch.randn(5, 3))
        self.head = nn.Linear(3, 2)

    def forward(self, x, target):
        q, r = torch.linalg.qr(self.raw)
        w = q * torch.sign(torch.diagonal(r)).unsqueeze(0)
        return {"loss": F.mse_loss(self.head(x @ w), target)}


def step():
    torch.manual_seed(1)
    return {"module": Orthogonal(), "inputs": (torch.randn(7, 5), torch.randn(7, 2))}
"""

WHITENING = """
class Whitened(nn.Module):
    \"\"\"Features whitened by their covariance's eigen-decomposition (ZCA: v diag(l^-1/2) v^T, which
    no eigenvector's sign changes) before a regression head; and a PCA reconstruction error.\"\"\"
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.enc = nn.Linear(4, 4)
        self.head = nn.Linear(4, 1)

    def forward(self, x, y):
        h = self.enc(x)
        c = h - h.mean(0)
        cov = c.mT @ c / (x.shape[0] - 1) + 1e-3 * torch.eye(4)
        evals, evecs = torch.linalg.eigh(cov)
        white = c @ evecs @ torch.diag(evals.rsqrt()) @ evecs.mT
        top = evecs[:, -2:]
        return {"loss": F.mse_loss(self.head(white).squeeze(-1), y),
                "pca": (c - c @ top @ top.mT).pow(2).mean()}


def step():
    torch.manual_seed(1)
    return {"module": Whitened(), "inputs": (torch.randn(16, 4), torch.randn(16))}
"""

PROCRUSTES = """
class Procrustes(nn.Module):
    \"\"\"Two embeddings aligned by the orthogonal Procrustes solution r = u vh of their
    cross-covariance's svd (u vh does not change with the pairs' signs).\"\"\"
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.src = nn.Linear(3, 4)
        self.dst = nn.Linear(3, 4)

    def forward(self, x):
        a, b = self.src(x), self.dst(x)
        u, s, vh = torch.linalg.svd(a.mT @ b)
        return {"loss": (a @ (u @ vh) - b).pow(2).mean()}


def step():
    torch.manual_seed(1)
    return {"module": Procrustes(), "inputs": (torch.randn(10, 3),)}
"""

STEPS = {"regularized": REGULARIZED, "orthogonal": ORTHOGONAL, "whitening": WHITENING, "procrustes": PROCRUSTES}


@pytest.mark.parametrize("body", STEPS.values(), ids=STEPS.keys())
def test_import_real_steps_give_torch_gradients(step_file, same_as_torch, body):
    path, _ = step_file(body)
    report = check(path, "step", same_as_torch)
    assert {report.status(p.name, "loss") for p in report.params} == {"flows"}
    assert run_cli("check", f"{path}:step").exit_code == 0


@pytest.mark.parametrize("body", [EACH, *STEPS.values()], ids=["each", *STEPS.keys()])
def test_imported_spectral_ops_run_in_float32_close_to_torch(step_file, body):
    close_in_float32(step_file(body)[0])


REPEATED = """
class Repeated(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(2.0))
        self.sq = nn.Parameter(torch.tensor([[1.0, 0.5], [0.0, 1.0]]))

    def forward(self, x):
        cov = self.scale * torch.eye(3)                     # one eigenvalue, three times
        evals, evecs = torch.linalg.eigh(cov)
        return {"vectors": (evecs @ torch.diag(evals) @ evecs.mT).sum(),
                "values": torch.linalg.eigvalsh(cov).sum() + torch.linalg.svdvals(cov).sum(),
                "singular": torch.linalg.svd(self.sq * 0 + torch.eye(2))[0].pow(2).sum() + self.sq.sum()}


def step():
    return {"module": Repeated(), "inputs": (torch.ones(1),)}
"""


def test_repeated_eigenvalues_give_torch_s_nan_gradient_where_the_vectors_are_read(step_file, same_as_torch):
    """torch's eigh backward divides by the gaps between eigenvalues: NaN at a repeated one once the
    eigenvectors are read, even by a loss their choice does not change; the values alone are fine."""
    path, _ = step_file(REPEATED)
    report = check(path, "step", same_as_torch)
    assert np.isnan(report.grad("scale", "vectors")) and report.grad("scale", "values") == pytest.approx(6.0)
    assert np.isnan(report.grad("sq", "singular")).all()
    assert run_cli("check", f"{path}:step").exit_code == 1   # GF105: a NaN gradient


SQUARE, TALL = [[1.0, 2.0], [2.0, 1.0]], [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
HOLED = "[[1.0, float('nan')], [0.0, 1.0]]"    # as text: the step file writes it as it is


@pytest.mark.parametrize("call, w, message", [
    ("torch.linalg.qr(w, mode='r')[1]", SQUARE,
     "unsupported op aten.linalg_qr.default with mode='r': torch cannot differentiate it (its gradient needs Q); "
     "write torch.linalg.qr(A) and keep R, the same values"),
    ("torch.linalg.qr(w, mode='complete')[0][:2, :2]", TALL,
     "unsupported op aten.linalg_qr.default with mode='complete' of a matrix with more rows than columns (3 x 2): "
     "torch cannot differentiate it; mode='reduced' gives the first columns of Q and the rows of R that are not 0"),
    ("torch.svd(w, compute_uv=False)[1].sum()", SQUARE,
     "unsupported op aten.svd.default with compute_uv=False: write torch.linalg.svdvals(A) for the singular values"),
    ("torch.linalg.pinv(w, atol=torch.tensor(0.1))", SQUARE,
     "unsupported op aten.linalg_pinv.atol_rtol_tensor with a tensor atol or rtol: give each as a number"),
    ("torch.linalg.svdvals(w).sum()", HOLED, "svdvals of a matrix holding NaN or inf (torch's LAPACK does not "
     "converge on it: torch raises LinAlgError, or gives NaN or other values)"),
    ("torch.linalg.eigh(w)[1]", HOLED, "eigvecsh of a matrix holding NaN or inf (torch's LAPACK does not converge "
     "on it: torch raises LinAlgError, or gives NaN or other values)"),
    ("torch.linalg.cholesky_ex(w)[0]", SQUARE,
     "cholesky_ex of a matrix that is not positive-definite: its leading minor of order 2 is not (torch gives "
     "info = 2 there, and a partial factor, which gradflow does not compute)"),
    ("torch.linalg.inv_ex(w)[0]", [[1.0, 2.0], [1.0, 2.0]],
     "inv_ex of a singular matrix (torch gives info > 0 there, and no inverse, which gradflow does not compute)"),
])
def test_what_torch_cannot_differentiate_or_sets_info_for_is_one_located_error(step_file, call, w, message):
    refused_at_the_call(step_file, call, w, message)


def test_cholesky_ex_info_is_torch_s_where_the_factor_exists(step_file):
    """info is 0 there; where torch's would not be, cholesky_ex is refused above."""
    t = torch.tensor(SQUARE) + 2 * torch.eye(2)
    assert torch.linalg.cholesky_ex(t).info.item() == 0 and torch.linalg.cholesky_ex(torch.tensor(SQUARE)).info == 2
    path, _ = step_file(REFUSED.replace("WEIGHT", repr(SQUARE)).replace(
        "CALL", "(torch.linalg.cholesky_ex(w + 2 * torch.eye(2)).info + 1)"))
    import gradflow
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    assert report.losses[0].value == 4.0 and report.status("w", "loss") == "blocked"


def test_torch_refuses_or_sets_info_where_those_errors_say():
    """The errors above describe torch: its backward raises for qr's mode 'r' and for 'complete'
    of a tall matrix; svdvals of NaN raises; cholesky_ex and inv_ex set info instead of raising."""
    for mode, w in (("r", SQUARE), ("complete", TALL)):
        t = torch.tensor(w, requires_grad=True)
        with pytest.raises(RuntimeError, match="linalg.qr|QR decomposition is not differentiable"):
            torch.linalg.qr(t, mode=mode)[1].sum().backward()
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.svdvals(torch.tensor(eval(HOLED)))
    assert torch.linalg.cholesky_ex(torch.tensor(SQUARE)).info.item() == 2
    assert torch.linalg.inv_ex(torch.tensor([[1.0, 2.0], [1.0, 2.0]])).info.item() > 0
