"""scatter_reduce's "amax", "amin" and "prod" and index_reduce against PyTorch: include_self both ways,
along either dim, ties (torch splits the gradient evenly among the entries equal to the result, x's own
entry counted even where include_self leaves it out), NaN, products with one and with two zeros in a
place, integer tensors; a graph network layer with max aggregation end to end, in float64 and float32;
an index out of range as one located error."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings(r"ignore:index_reduce\(\) is in beta")]

from tests.importers.conftest import check, close_in_float32, one_error_at_call  # noqa: E402
from tests.importers.test_torch_refusals import run_cli  # noqa: E402


REDUCTIONS = """
class Reductions(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.x = nn.Parameter(torch.randn(4, 3))
        self.src = nn.Parameter(torch.randn(5, 3))
        ties = torch.tensor([[1.0, 2.0, 0.0], [2.0, 2.0, 5.0], [2.0, -1.0, 5.0], [0.5, 3.0, 0.0], [1.0, 7.0, 0.0]])
        self.ties = nn.Parameter(ties)                  # ties among src, and with x's own entry (2.0, 5.0)
        self.own = nn.Parameter(torch.tensor([[2.0, 0.0, 5.0], [1.0, 3.0, 0.0], [0.0, 0.0, 1.0], [4.0, 4.0, 4.0]]))

    def forward(self, index):
        w = torch.arange(1.0, 13.0).reshape(4, 3)    # so that no sum hides an entry's gradient
        rows = index[:, None].expand(-1, 3)
        out = {}
        for reduce in ("amax", "amin", "prod"):
            for own in (True, False):
                out[f"{reduce}_{own}"] = ((self.x.scatter_reduce(0, rows, self.src, reduce, include_self=own)
                                           + self.own.scatter_reduce(0, rows, self.ties, reduce, include_self=own)
                                           + self.x.scatter_reduce(1, index[:4, None].remainder(3), self.src[:4, :1],
                                                                   reduce, include_self=own)) * w).sum()
        return out


def step():
    return {"module": Reductions(), "inputs": (torch.tensor([0, 0, 2, 0, 3]),)}
"""


def test_scatter_reduce_amax_amin_and_prod_give_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(REDUCTIONS)
    check(path, "step", same_as_torch)


CORNERS = """
class Corners(nn.Module):
    def __init__(self):
        super().__init__()
        self.x = nn.Parameter(torch.tensor([2.0, 0.0, 3.0, float("nan"), 1.0]))
        self.src = nn.Parameter(torch.tensor([0.0, 4.0, 0.0, 0.0, 5.0, 2.0, 1.0, 9.0]))   # place 1: two zeros
        self.nan = nn.Parameter(torch.tensor([1.0, float("nan"), 2.0, 5.0, 1.0, 1.0, 3.0, 2.0]))

    def forward(self, index):
        w = torch.arange(1.0, 6.0)
        return {"prods": (self.x.scatter_reduce(0, index, self.src, "prod") * w).sum()
                         + (self.x.scatter_reduce(0, index, self.src, "prod", include_self=False) * w).sum(),
                "extremes": (self.x.scatter_reduce(0, index, self.nan, "amax") * w).sum()
                            + (self.x.scatter_reduce(0, index, self.nan, "amin", include_self=False) * w).sum(),
                "counted": (torch.zeros(5, dtype=torch.long).scatter_reduce(0, index, index * 2, "amax")
                            * self.x).sum()}


def step():
    return {"module": Corners(), "inputs": (torch.tensor([0, 1, 1, 2, 0, 4, 4, 4]),)}
"""


def test_scatter_reduce_corners_with_zeros_nan_and_integers_give_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(CORNERS)
    report = check(path, "step", same_as_torch)
    # place 0 (x 2.0, src 0.0 and 5.0): the zero's gradient is the product of the others, x's in or out;
    # place 1 (x 0.0, src 4.0 and 0.0): 0 beside x's zero, 4 times the weight 2 where x is left out
    assert report.grad("src", "prods")[:3].tolist() == [2 * 5 + 5, 0.0, 4 * 2]


INDEX_REDUCE = """
class IndexReduce(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.x = nn.Parameter(torch.randn(4, 3))
        self.src = nn.Parameter(torch.randn(3, 5))
        self.tied = nn.Parameter(torch.tensor([[1.0, 1.0], [2.0, 0.0], [1.0, 0.0]]))

    def forward(self, index):
        w = torch.arange(1.0, 13.0).reshape(4, 3)
        out = {}
        for reduce in ("amax", "amin", "prod", "mean"):
            for own in (True, False):
                out[f"{reduce}_{own}"] = ((self.x.index_reduce(0, index, self.src[:, :3], reduce, include_self=own)
                                           + self.x.index_reduce(1, index[:2] % 3, self.tied[:2].repeat(2, 1),
                                                                 reduce, include_self=own)
                                           ) * w).sum()
        return out


def step():
    return {"module": IndexReduce(), "inputs": (torch.tensor([3, 0, 3]),)}
"""


def test_index_reduce_gives_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(INDEX_REDUCE)
    check(path, "step", same_as_torch)


GNN = """
class MaxAggregation(nn.Module):
    '''A graph layer with max aggregation, as PyG's MessagePassing(aggr="max") or GraphSAGE's pool
    aggregator: each edge's message from its source, the maximum of a node's incoming messages, nodes
    with none left at 0.'''
    def __init__(self, dim=4, out=5):
        super().__init__()
        self.message = nn.Linear(2 * dim, out)
        self.update = nn.Linear(dim + out, out)

    def forward(self, x, edges):
        src, dst = edges
        msg = F.relu(self.message(torch.cat([x[dst], x[src] - x[dst]], dim=-1)))   # EdgeConv's message
        agg = torch.zeros(x.shape[0], msg.shape[1]).scatter_reduce(
            0, dst[:, None].expand(-1, msg.shape[1]), msg, "amax", include_self=False)
        return self.update(torch.cat([x, agg], dim=-1))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = MaxAggregation(3, 4), MaxAggregation(4, 2)

    def forward(self, x, edges, label):
        h = self.conv2(F.relu(self.conv1(x, edges)), edges)
        return {"loss": F.cross_entropy(h, label)}


def step():
    torch.manual_seed(0)
    edges = torch.tensor([[0, 1, 2, 3, 4, 0, 2], [1, 2, 0, 1, 1, 3, 3]])   # node 4 receives nothing
    return {"module": Net(), "inputs": (torch.randn(5, 3), edges, torch.tensor([0, 1, 1, 0, 1])),
            "expect": {"loss": {"flows": ["*"]}}}
"""


def test_a_graph_layer_with_max_aggregation_gives_torch_gradients_and_passes_its_check(step_file, same_as_torch):
    path, _ = step_file(GNN)
    report = check(path, "step", same_as_torch)
    assert {report.status(p.name, "loss") for p in report.params} == {"flows"}
    assert run_cli("check", f"{path}:step").exit_code == 0


@pytest.mark.parametrize("body", [REDUCTIONS, INDEX_REDUCE, GNN], ids=["scatter", "index", "gnn"])
def test_imported_scatter_reductions_run_in_float32_close_to_torch(step_file, body):
    close_in_float32(step_file(body)[0])


REFUSED = """
class Refused(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 2))

    def forward(self, index):
        w = self.w
        return {"loss": CALL.sum()}  # @call


def step():
    return {"module": Refused(), "inputs": (torch.tensor([[0], [1], [5], [2]]),)}
"""


@pytest.mark.parametrize("call, message", [
    ("torch.zeros(3, 2).scatter_reduce(0, index, w[:, :1], 'amax')", "index 5 is out of range for size 3"),
    ("torch.zeros(6, 2).scatter_reduce(0, index, w, 'prod')",
     "unsupported op aten.scatter_reduce.two with reduce=\"prod\" and a src larger than the index"),
    ("torch.zeros(6, 4).index_reduce(1, index[:3, 0] % 4, w, 'amax')",
     "unsupported op aten.index_reduce.default with 3 indices for a source of 2 along dim 1 (torch raises)"),
])
def test_what_torch_refuses_or_gives_no_derivative_for_is_one_located_error(step_file, call, message):
    one_error_at_call(step_file, REFUSED.replace("CALL", call), message)
