"""F.unfold (im2col) and F.fold (col2im) against PyTorch: kernel sizes, dilation, padding, stride
above the kernel, unbatched inputs, overlapping blocks that fold adds up, NaN and inf in a block;
a local-window attention built on F.unfold and an involution (unfold, weigh, fold) end to end, in
float64 and float32; inputs torch refuses as one located error each."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from tests.importers.conftest import check, close_in_float32, one_error_at_call  # noqa: E402
from tests.importers.test_torch_refusals import run_cli  # noqa: E402


WINDOWS = """
class Windows(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 1)

    def forward(self, img):
        h = self.conv(img)                                                       # [2, 3, 7, 6]
        w = torch.arange(1.0, 4.0).reshape(1, 3, 1)
        return {"plain": F.unfold(h, 3).square().sum() + F.unfold(h, (2, 3), stride=(1, 2)).sin().sum(),
                "padded": F.unfold(h, 3, dilation=(2, 1), padding=(1, 2), stride=2).square().sum()
                          + F.unfold(h[0], 2, stride=3).sin().sum(),            # unbatched, stride > kernel
                "folded": (F.fold(F.unfold(h, 3, padding=1), (7, 6), 3, padding=1) * w[..., None]).square().sum()
                          + F.fold(F.unfold(h, 2, stride=2), (7, 6), 2, stride=2).sin().sum()   # 7 = 2 * 3 + 1
                          + F.fold(F.unfold(h, (3, 2), dilation=(1, 2), stride=(2, 1)), (7, 6), (3, 2),
                                   dilation=(1, 2), stride=(2, 1)).square().sum(),
                "blocks": F.fold(h.reshape(2, 126)[:, :90].reshape(2, 6, 15), (4, 5), (2, 3), padding=(1, 1),
                                 stride=(1, 2)).sin().sum()                     # blocks made up, not unfolded
                          + F.fold(h[0].reshape(126)[:96].reshape(8, 12), (5, 7), 2, stride=(1, 2),
                                   dilation=(1, 2)).square().sum()}


def step():
    torch.manual_seed(0)
    return {"module": Windows(), "inputs": (torch.randn(2, 2, 7, 6),)}
"""


def test_unfold_and_fold_with_padding_dilation_and_stride_give_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(WINDOWS)
    check(path, "step", same_as_torch)


OVERLAPS = """
class Overlaps(nn.Module):
    def __init__(self):
        super().__init__()
        cols = torch.arange(1.0, 1 + 4 * 9).reshape(1, 4, 9)
        cols[0, 1, 4] = float("inf")      # two blocks' overlap: inf, beside finite numbers
        self.cols = nn.Parameter(cols)
        self.nan = nn.Parameter(torch.tensor([[[1.0, float("nan")], [2.0, 3.0]]]))

    def forward(self):
        w = torch.arange(1.0, 17.0).reshape(1, 1, 4, 4)
        return {"sums": (F.fold(self.cols, 4, 2, stride=1) * w).sum(),         # each inside entry: 4 blocks
                "nans": F.fold(self.nan, (1, 3), (1, 2)).sum()}


def step():
    return {"module": Overlaps(), "inputs": ()}
"""


def test_fold_adds_overlapping_blocks_as_torch_with_inf_and_nan(step_file, same_as_torch):
    path, _ = step_file(OVERLAPS)
    report = check(path, "step", same_as_torch)
    assert report.losses[0].value == np.inf
    # every block entry's gradient is the weight of the image entry it lands on
    assert report.grad("cols", "sums")[0, 0].tolist() == [1.0, 2.0, 3.0, 5.0, 6.0, 7.0, 9.0, 10.0, 11.0]


LOCAL_ATTENTION = """
class LocalAttention(nn.Module):
    '''Each pixel attends to its 3x3 neighbourhood (stand-alone self-attention, as in SASA or HaloNet):
    keys and values gathered with F.unfold, a relative position bias per offset.'''
    def __init__(self, dim=8, heads=2, window=3):
        super().__init__()
        self.heads, self.window = heads, window
        self.qkv = nn.Conv2d(dim, 3 * dim, 1, bias=False)
        self.rel = nn.Parameter(torch.randn(heads, 1, window * window, 1) * 0.1)
        self.out = nn.Conv2d(dim, dim, 1)

    def forward(self, x):
        n, c, h, w = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=1)
        d = c // self.heads
        q = q.reshape(n, self.heads, d, 1, h * w)
        k = F.unfold(k, self.window, padding=self.window // 2).reshape(n, self.heads, d, self.window ** 2, h * w)
        v = F.unfold(v, self.window, padding=self.window // 2).reshape(n, self.heads, d, self.window ** 2, h * w)
        scores = (q * k).sum(2, keepdim=True) / d ** 0.5 + self.rel            # [n, heads, 1, 9, h w]
        mixed = (scores.softmax(dim=3) * v).sum(3)                              # [n, heads, d, h w]
        return self.out(mixed.reshape(n, c, h, w))


class Involution(nn.Module):
    '''An involution: a 3x3 kernel made per pixel from its own features, applied with unfold, then the
    blocks folded back (a stride-2 layer, whose blocks overlap).'''
    def __init__(self, dim=8, window=3):
        super().__init__()
        self.window = window
        self.kernel = nn.Conv2d(dim, window * window, 1)

    def forward(self, x):
        n, c, h, w = x.shape
        weights = self.kernel(x).reshape(n, 1, self.window ** 2, h * w)
        patches = F.unfold(x, self.window, padding=1).reshape(n, c, self.window ** 2, h * w)
        out = F.unfold(x, 3, padding=1, stride=2)
        return (patches * weights).sum(2).reshape(n, c, h, w) + F.fold(out, (h, w), 3, padding=1, stride=2)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.attend, self.involve = nn.Conv2d(3, 8, 3, padding=1), LocalAttention(), Involution()
        self.head = nn.Linear(8, 3)

    def forward(self, img, label):
        h = self.involve(F.relu(self.attend(F.relu(self.stem(img)))))
        return {"loss": F.cross_entropy(self.head(h.mean((2, 3))), label)}


def step():
    torch.manual_seed(0)
    return {"module": Net(), "inputs": (torch.randn(2, 3, 6, 5), torch.tensor([0, 2]))}
"""


def test_local_window_attention_and_an_involution_on_unfold_and_fold_give_torch_gradients(step_file, same_as_torch):
    path, _ = step_file(LOCAL_ATTENTION)
    report = check(path, "step", same_as_torch)
    assert {report.status(p.name, "loss") for p in report.params} == {"flows"}
    assert run_cli("check", f"{path}:step").exit_code == 0


@pytest.mark.parametrize("body", [WINDOWS, LOCAL_ATTENTION], ids=["windows", "attention"])
def test_imported_unfold_and_fold_run_in_float32_close_to_torch(step_file, body):
    close_in_float32(step_file(body)[0])


REFUSED = """
class Refused(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(1, 8, 6))

    def forward(self):
        w = self.w
        return {"loss": CALL.sum()}  # @call


def step():
    return {"module": Refused(), "inputs": ()}
"""


@pytest.mark.parametrize("call, message", [
    ("F.fold(w, (4, 4), 2)", "expected input.size(-1) to be 9 but got 6"),
    ("F.fold(w, (4, 4), 3)", "to be divisible by the product of kernel_size"),
    ("F.unfold(w[None], 7)", "calculated shape of the array of sliding blocks"),
])
def test_a_fold_or_unfold_torch_refuses_is_one_located_error(step_file, call, message):
    one_error_at_call(step_file, REFUSED.replace("CALL", call), message)
