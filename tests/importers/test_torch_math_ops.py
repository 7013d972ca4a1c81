"""torch.prod, atan2, acos, asin, atan, remainder (%), fmod, bucketize, searchsorted and the
Frobenius matrix norms imported from training steps, against torch.autograd parameter by
parameter in float64: prod with zeros, atan2 at the origin, acos and asin at +-1 and beyond,
remainders of negative numbers and by 0, integer remainders and abs used as indices, the
searches on ties as implicit cuts; and what stays refused (the matrix norms of order +-1 and +-inf,
an integer remainder by 0) as one located error. The nuclear and spectral norms are in
test_torch_spectral.py."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from gradflow.errors import ModelError  # noqa: E402
from gradflow.importers import import_python  # noqa: E402
from tests.importers.conftest import check, close_in_float32  # noqa: E402
from tests.importers.test_torch_refusals import run_cli  # noqa: E402


PRODUCTS = """
class Products(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 4)
        # rows: no zero, one zero, two zeros, a zero beside an infinity
        self.w = nn.Parameter(torch.tensor([[2.0, -0.5, 3.0, 1.5], [2.0, 0.0, 3.0, -1.0], [0.0, 2.0, 0.0, 4.0]]))
        self.one = nn.Parameter(torch.tensor([2.0, 0.0, -3.0, 0.5]))     # one zero: the others' product
        self.two = nn.Parameter(torch.tensor([2.0, 0.0, -3.0, 0.0]))     # two zeros: 0 everywhere

    def forward(self, x, far, mask):
        h, w, n = torch.tanh(self.lin(x)), self.w, torch.arange(1.0, 5.0)
        every = mask.prod(1)                                      # a bool's product: an integer, 1 where all are
        return {"rows": (torch.prod(w, 1) * torch.tensor([1.0, 2.0, 3.0])).sum()
                        + (torch.prod(w, dim=0, keepdim=True) * n).sum() + (w.prod(-1, keepdim=True) * n).sum(),
                "whole": torch.prod(self.one) + torch.prod(self.two) * 3 + self.one.prod() * self.two.prod(),
                "net": torch.prod(h + 1.5, 0).sum() + torch.prod(h).abs() + (h.sum(1) * every).sum()
                       + torch.prod(h[0], 0, dtype=torch.float64) + torch.prod(h.sum(), 0) * 2,
                "far": torch.prod(torch.cat([self.one, far]), 0)}   # 0 * inf: NaN, as torch


def step():
    torch.manual_seed(0)
    return {"module": Products(), "inputs": (torch.randn(5, 3), torch.tensor([float("inf")]),
                                             torch.tensor([[1, 1], [1, 0], [0, 0], [1, 1], [0, 1]]).bool())}
"""


def test_import_prod_gives_torch_gradients_with_zeros_present(step_file, same_as_torch):
    path, _ = step_file(PRODUCTS)
    report = check(path, "step", same_as_torch)
    assert report.grad("one", "whole")[1] == 2.0 * -3.0 * 0.5     # the others' product (two's product is 0)
    assert report.status("two", "whole") == "zero"    # two zeros: torch's gradient is 0 everywhere
    assert np.isnan(report.grad("one", "far")).any()


ANGLES = """
class Angles(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        # (y, x): the origin, signed zeros, the axes, a point in each quadrant
        self.y = nn.Parameter(torch.tensor([0.0, -0.0, 0.0, 1.0, 0.0, 1.0, -1.0, -2.0, 3.0]))
        self.x = nn.Parameter(torch.tensor([0.0, -0.0, -2.0, 0.0, 3.0, 1.0, 2.0, -0.5, -4.0]))
        # +-1 (infinite gradients), beyond (NaN), 0, and inside
        self.c = nn.Parameter(torch.tensor([-1.0, 1.0, -1.5, 1.5, 0.0, 0.5, -0.25]))

    def forward(self, z, far):
        h, n, c = self.lin(z), torch.arange(1.0, 10.0), self.c
        return {"angle": (torch.atan2(self.y, self.x) * n).sum() + torch.arctan2(h[:, 0], h[:, 1]).sum(),
                "heading": torch.atan2(h[:, :1], self.x[3:6]).sum(),        # broadcast
                "inside": (torch.acos(c[4:]) + torch.asin(c[4:]) * 2 + torch.arccos(torch.tanh(h)).sum()
                           + torch.arcsin(torch.tanh(h)).sum()).sum(),
                "acos_edges": (torch.acos(c[:2]) * torch.tensor([1.0, 2.0])).sum(),
                "asin_edges": torch.asin(c[:2]).sum() * 3,
                "beyond": torch.acos(c[2:4]).sum() + torch.asin(c[2:4]).sum(),
                "arctangent": (torch.atan(torch.cat([self.x, far])) * torch.arange(11.0)).sum() + torch.arctan(h).sum()}


def step():
    torch.manual_seed(0)
    return {"module": Angles(), "inputs": (torch.randn(4, 3), torch.tensor([float("inf"), -float("inf")]))}
"""


def test_import_atan2_acos_asin_atan_give_torch_gradients_at_the_origin_and_at_plus_minus_one(
        step_file, same_as_torch):
    path, _ = step_file(ANGLES)
    report = check(path, "step", same_as_torch)
    assert report.grad("y", "angle")[:2].tolist() == [0.0, 0.0] == report.grad("x", "angle")[:2].tolist()
    assert report.grad("c", "acos_edges")[:2].tolist() == [-np.inf, -np.inf]
    assert report.grad("c", "asin_edges")[:2].tolist() == [np.inf, np.inf]
    assert np.isnan(report.grad("c", "beyond")[2:4]).all()


REMAINDERS = """
class Remainders(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.tensor([5.5, -5.5, 5.5, -5.5, 0.0, 1.0, -1.0, 7.25]))
        self.b = nn.Parameter(torch.tensor([2.0, 2.0, -2.0, -2.0, 2.0, 3.0, 3.0, -0.5]))
        self.zero = nn.Parameter(torch.tensor([0.0, 0.0]))
        self.emb = nn.Embedding(6, 2)

    def forward(self, ids):
        a, b, n = self.a, self.b, torch.arange(1.0, 9.0)
        pos = (ids % 6 + torch.remainder(ids, 4)) % 6                     # integers that index
        return {"remainders": (torch.remainder(a, b) * n).sum() + (a % 0.75).sum() + (a % b[:1]).sum(),
                "fmods": (torch.fmod(a, b) * n).sum() + torch.fmod(a, -1.5).sum() + torch.fmod(a[:3], 2).sum(),
                "by_zero": torch.remainder(a[:2], self.zero).sum() + torch.fmod(a[:2], self.zero).sum(),   # NaN
                "index": self.emb(pos).sum() + self.emb(torch.fmod(ids, 5).abs()).sum() * 2
                         + self.emb((ids - 8).abs() % 6).sum() * 3 + self.emb(7 % (ids % 3 + 1)).sum() * 4}


def step():
    torch.manual_seed(0)
    return {"module": Remainders(), "inputs": (torch.tensor([0, -7, 9, 13, -2]),)}
"""


def test_import_remainder_and_fmod_give_torch_values_gradients_and_integer_indices(step_file, same_as_torch):
    path, _ = step_file(REMAINDERS)
    report = check(path, "step", same_as_torch)
    assert report.grad("a", "remainders").min() >= 1.0                 # 1 into the dividend, at every entry
    assert report.grad("zero", "by_zero").tolist() == [-np.inf, np.inf]   # -floor(a / 0) - trunc(a / 0)
    exprs = [line.expr for line in import_python(f"{path}:step").graph]
    assert "remainder(ids, 6)" in exprs and "fmod(ids, 5)" in exprs


SEARCHES = """
class Buckets(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(9, 2)
        self.scale = nn.Parameter(torch.tensor(1.0))
        self.edges = nn.Parameter(torch.tensor([0.0, 0.5, 0.5, 1.0]))   # boundaries that take no gradient

    def forward(self, v, rows):
        edges, u = self.edges, v * self.scale                     # v: on the edges, between, beyond, ties
        left, right = torch.bucketize(u, edges), torch.bucketize(u, edges, right=True)
        found = torch.searchsorted(edges, u, side="right", out_int32=True) + torch.searchsorted(edges, u)
        flipped = torch.searchsorted(edges.flip(0), u, sorter=torch.tensor([3, 2, 1, 0]))
        each = torch.searchsorted(rows, torch.tensor([[0.5], [2.0]]), right=True)   # a row of boundaries each
        return {"buckets": (self.emb(left) * 1.0 + self.emb(right) * 2.0 + self.emb(found.long()) * 3.0).sum()
                           + (self.emb(flipped) * 4.0).sum() + self.emb(each).sum()
                           + torch.bucketize(0.5, edges) * u.sum(),
                "through": (u * torch.bucketize(u, edges, right=True)).sum()}


def step():
    torch.manual_seed(0)
    return {"module": Buckets(), "inputs": (torch.tensor([-1.0, 0.0, 0.25, 0.5, 0.75, 1.0, 2.0]),
                                            torch.tensor([[0.0, 0.5, 1.0], [1.0, 2.0, 3.0]]))}
"""


def test_import_bucketize_and_searchsorted_give_torch_indices_and_cut_the_gradient(step_file, same_as_torch):
    path, _ = step_file(SEARCHES)
    report = check(path, "step", same_as_torch)
    assert report.status("edges", "buckets") == "blocked"      # as torch: no gradient into boundaries
    assert report.status("scale", "through") == "flows"        # u itself still trains
    assert {s.cut.op for s in report.stops} == {"searchsorted"}
    assert all(s.cut.kind == "implicit" for s in report.stops)


NORMS = """
class Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([[3.0, 0.0, -4.0], [1.0, 2.0, 0.5]]))
        self.batch = nn.Parameter(torch.tensor([[[1.0, -2.0], [0.5, 0.0]], [[0.0, 0.0], [0.0, 0.0]]]))

    def forward(self, x):
        w, b = self.w, self.batch
        return {"fro": torch.linalg.matrix_norm(w) + torch.norm(w, p="fro", dim=(0, 1)) + torch.linalg.norm(w, "fro")
                       + torch.linalg.matrix_norm(w, "fro", dim=(1, 0), keepdim=True).sum() + w.norm(p="fro"),
                "batched": (torch.linalg.matrix_norm(b) * torch.tensor([1.0, 2.0])).sum()     # a zero matrix: 0
                           + torch.norm(b, p="fro", dim=(0, 2)).sum() + torch.linalg.norm(b, dim=(-2, -1)).sum()}


def step():  # @def
    return {"module": Norms(), "inputs": (torch.randn(2),)}
"""


def test_import_frobenius_matrix_norms_give_torch_gradients_zero_at_a_zero_matrix(step_file, same_as_torch):
    path, _ = step_file(NORMS)
    report = check(path, "step", same_as_torch)
    assert not report.grad("batch", "batched")[1].any()


@pytest.mark.parametrize("call, op, says", [
    ("torch.linalg.matrix_norm(w, -1)", "aten.linalg_matrix_norm.default", "with ord=-1 over two axes (a matrix norm)"),
    ("torch.linalg.norm(w, float('inf'))", "aten.linalg_norm.default", "with ord=inf over two axes (a matrix norm)"),
])
def test_matrix_norms_of_order_1_and_inf_are_refused_at_the_users_line_saying_why(step_file, call, op, says):
    path, line_of = step_file(NORMS.replace("torch.linalg.matrix_norm(w) +", f"{call} +  # @call\n"
                                            "                       "))
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:step")
    e = caught.value
    assert e.message.startswith(f"unsupported op {op} {says}")
    assert e.message.endswith("of the matrix norms gradflow has the Frobenius (ord='fro'), nuclear ('nuc') and "
                              "spectral (2, -2) ones")
    assert e.line == line_of("call")
    result = run_cli("check", f"{path}:step")
    assert result.exit_code == 2
    assert result.stderr == f"{path}:{e.line}:{e.col}: error: {e.message}\n"


BY_ZERO = """
class ByZero(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(6, 2)

    def forward(self, ids, d):
        return {"loss": self.emb(ids % d).sum()}  # @rem


def step():
    return {"module": ByZero(), "inputs": (torch.tensor([0, 3, 7]), torch.tensor([2, 0, 3]))}


class Literal(ByZero):
    def forward(self, ids, d):
        return {"loss": self.emb(torch.fmod(ids, 0)).sum()}  # @fmod


def literal():
    return {"module": Literal(), "inputs": (torch.tensor([0, 3, 7]), torch.tensor([2, 0, 3]))}


class Number(ByZero):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([1.0, 2.0]))

    def forward(self, ids, d):
        return {"loss": (3.0 % self.w).sum()}  # @number


def number():
    return {"module": Number(), "inputs": (torch.tensor([0, 3, 7]), torch.tensor([2, 0, 3]))}
"""


@pytest.mark.parametrize("func, marker, col, message", [
    ("step", "rem", 34, "remainder of an integer tensor by 0 (torch raises ZeroDivisionError)"),
    ("literal", "fmod", 34, "fmod of an integer tensor by 0 (torch raises ZeroDivisionError)"),
    ("number", "number", 26, "unsupported op aten.remainder.Scalar_Tensor of a number by a float tensor "
                             "(torch has no gradient for it)"),
])
def test_an_integer_remainder_by_zero_or_of_a_number_by_a_parameter_is_one_located_error(
        step_file, func, marker, col, message):
    path, line_of = step_file(BY_ZERO)
    result = run_cli("check", f"{path}:{func}")
    assert result.exit_code == 2
    assert result.stderr == f"{path}:{line_of(marker)}:{col}: error: {message}\n"
    assert "Traceback" not in result.output


def test_imported_math_ops_run_in_float32_close_to_torch(step_file):
    for body in (PRODUCTS, ANGLES, REMAINDERS, SEARCHES, NORMS):
        close_in_float32(step_file(body)[0])
