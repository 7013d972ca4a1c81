"""3-D convolutions and pools against PyTorch: Conv3d with stride, padding ("same" with an even
kernel too), dilation, groups and bias, unbatched; ConvTranspose3d; max and average pools with
padding, ceil_mode, dilation, count_include_pad and divisor_override; adaptive average pools; max
pools' ties and NaN; a 3-D CNN classifying a clip end to end, in float64 and float32; and an input
torch refuses as one located error."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:Using padding='same'")]

from tests.importers.conftest import check, close_in_float32, one_error_at_call  # noqa: E402
from tests.importers.test_torch_refusals import run_cli  # noqa: E402


CONVS = """
class Convs(nn.Module):
    def __init__(self):
        super().__init__()
        self.plain = nn.Conv3d(2, 3, 3, stride=(1, 2, 2), padding=1)
        self.same = nn.Conv3d(2, 2, (2, 3, 4), padding="same", bias=False)      # even kernels: one more after
        self.dilated = nn.Conv3d(2, 4, 2, dilation=(1, 2, 3), padding=(0, 1, 2), groups=2)
        self.depth = nn.Conv3d(2, 2, 3, padding=1, groups=2)
        self.strided = nn.Conv3d(2, 1, 1, stride=3)                              # stride above the kernel

    def forward(self, clip):
        return {"plain": self.plain(clip).square().sum() + self.strided(clip).sin().sum(),
                "same": self.same(clip).square().sum() + F.conv3d(clip[0], self.depth.weight, groups=2).sin().sum(),
                "grouped": self.dilated(clip).square().sum() + self.depth(clip).cos().sum()
                           + F.conv3d(clip, self.plain.weight, padding="valid", stride=2).square().sum()}


def step():
    torch.manual_seed(0)
    return {"module": Convs(), "inputs": (torch.randn(2, 2, 5, 6, 7),)}
"""


def test_import_conv3d_with_stride_padding_dilation_and_groups_gives_torch_values_and_gradients(
        step_file, same_as_torch):
    path, _ = step_file(CONVS)
    check(path, "step", same_as_torch)


TRANSPOSED = """
class Transposed(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose3d(3, 2, (2, 4, 4), stride=(1, 2, 2), padding=(0, 1, 1))   # a 3-D U-Net's up step
        self.odd = nn.ConvTranspose3d(3, 2, 3, stride=2, padding=1, output_padding=(1, 0, 1), dilation=(1, 2, 1))
        self.grouped = nn.ConvTranspose3d(3, 6, 2, stride=2, groups=3, bias=False)

    def forward(self, vol):
        return {"up": self.up(vol).square().sum() + self.odd(vol).sin().sum(),
                "grouped": self.grouped(vol).square().sum() + F.conv_transpose3d(vol[0], self.up.weight).cos().sum()}


def step():
    torch.manual_seed(0)
    return {"module": Transposed(), "inputs": (torch.randn(2, 3, 2, 3, 4),)}
"""


def test_import_transposed_3d_convolutions_give_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(TRANSPOSED)
    check(path, "step", same_as_torch)


POOLS = """
class Pools(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(2, 3, 3, padding=1)

    def forward(self, clip):
        h = self.conv(clip)                                                       # [2, 3, 5, 7, 6]
        return {"maxed": F.max_pool3d(h, 3, 2, padding=1).square().sum()
                         + F.max_pool3d(h, (1, 2, 2)).sin().sum()                 # a video net's spatial pool
                         + F.max_pool3d(h, 2, ceil_mode=True).square().sum()
                         + F.max_pool3d(h, (2, 2, 3), (3, 3, 2), ceil_mode=True).sin().sum(),   # stride > kernel
                "dilated": F.max_pool3d(h, 2, 1, padding=1, dilation=(1, 2, 2)).square().sum()
                           + F.max_pool3d(h[0], 2, dilation=2, ceil_mode=True).sin().sum(),
                "averaged": F.avg_pool3d(h, 3, 2, padding=1).square().sum()
                            + F.avg_pool3d(h, 3, 2, padding=1, count_include_pad=False).sin().sum()
                            + F.avg_pool3d(h, 2, ceil_mode=True).square().sum()
                            + F.avg_pool3d(h, (2, 3, 2), 2, padding=1, ceil_mode=True,
                                           count_include_pad=False).sin().sum()
                            + F.avg_pool3d(h, 2, divisor_override=3).square().sum()
                            + F.avg_pool3d(h, (2, 3, 3), 2, padding=(0, 1, 1), ceil_mode=True).sin().sum(),
                "adaptive": F.adaptive_avg_pool3d(h, 1).square().sum() + F.adaptive_avg_pool3d(h, (5, 1, 3)).sin().sum()
                            + F.adaptive_avg_pool3d(h, (2, 3, 4)).square().sum()
                            + F.adaptive_avg_pool3d(h[0], (5, 7, 4)).sin().sum()}


def step():
    torch.manual_seed(0)
    return {"module": Pools(), "inputs": (torch.randn(2, 2, 5, 7, 6),)}
"""


def test_import_3d_pools_with_padding_ceil_mode_and_adaptive_sizes_give_torch_values_and_gradients(
        step_file, same_as_torch):
    path, _ = step_file(POOLS)
    check(path, "step", same_as_torch)


TIES = """
class Ties(nn.Module):
    def __init__(self):
        super().__init__()
        self.flat = nn.Parameter(torch.ones(1, 1, 4, 4, 4))        # every window a tie
        nan = torch.ones(1, 1, 2, 2, 2)
        nan[0, 0, 0, 1, 0] = nan[0, 0, 1, 0, 1] = float("nan")      # two NaNs in one window
        self.nan = nn.Parameter(nan)

    def forward(self):
        w = torch.arange(1.0, 9.0).reshape(2, 2, 2)
        return {"ties": (F.max_pool3d(self.flat, 2) * w).sum(),
                "padded": (F.max_pool3d(self.flat, 3, 2, padding=1) * w).sum(),
                "nans": F.max_pool3d(self.nan, 2).sum()}


def step():
    return {"module": Ties(), "inputs": ()}
"""


def test_import_max_pool3d_ties_go_to_the_first_entry_and_nan_to_the_last_nan_as_torch(step_file, same_as_torch):
    path, _ = step_file(TIES)
    report = check(path, "step", same_as_torch)
    # each window's first entry takes its output's gradient: windows at 0, 2 (and from -1, 1 when padded)
    ties, padded = report.grad("flat", "ties")[0, 0], report.grad("flat", "padded")[0, 0]
    assert ties[::2, ::2, ::2].ravel().tolist() == list(range(1, 9)) and ties.sum() == 36
    assert padded[:2, :2, :2].ravel().tolist() == list(range(1, 9)) and padded.sum() == 36
    assert np.flatnonzero(report.grad("nan", "nans")).tolist() == [5]


CLIP = """
class C3D(nn.Module):
    '''A small 3-D CNN over video clips [N, 3, T, H, W], as C3D or a 3-D U-Net's encoder.'''
    def __init__(self, classes=4):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv3d(3, 8, 3, padding=1), nn.BatchNorm3d(8), nn.ReLU(), nn.MaxPool3d((1, 2, 2)),
            nn.Conv3d(8, 8, 3, padding=1, groups=2), nn.ReLU(), nn.MaxPool3d(2, 2, ceil_mode=True),
            nn.Conv3d(8, 16, (3, 1, 1), padding=(1, 0, 0)), nn.ReLU(), nn.AdaptiveAvgPool3d(1))
        self.head = nn.Linear(16, classes)

    def forward(self, clip, label):
        logits = self.head(self.features(clip).flatten(1))
        return {"loss": F.cross_entropy(logits, label)}


def step():
    torch.manual_seed(0)
    return {"module": C3D(), "inputs": (torch.randn(2, 3, 5, 8, 8), torch.tensor([1, 3])),
            "expect": {"loss": {"flows": ["features.*", "head.*"]}}}
"""


def test_a_3d_cnn_classifying_a_clip_gives_torch_gradients_and_passes_its_check(step_file, same_as_torch):
    path, _ = step_file(CLIP)
    report = check(path, "step", same_as_torch)
    assert {report.status(p.name, "loss") for p in report.params} == {"flows"}
    assert run_cli("check", f"{path}:step").exit_code == 0


@pytest.mark.parametrize("body", [CONVS, POOLS, CLIP], ids=["convs", "pools", "clip"])
def test_imported_3d_convolutions_and_pools_run_in_float32_close_to_torch(step_file, body):
    close_in_float32(step_file(body)[0])


REFUSED = """
class Refused(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 4, 3)

    def forward(self, clip):
        return {"loss": CALL.sum()}  # @call


def step():
    return {"module": Refused(), "inputs": (torch.randn(1, 2, 4, 4, 4),)}
"""


@pytest.mark.parametrize("call, message", [
    ("self.conv(clip)", "to have 3 channels, but got 2 channels instead"),
    ("F.max_pool3d(clip, 5)", "Output size is too small"),
    ("F.conv3d(clip[0, 0], self.conv.weight)", "Expected 4D (unbatched) or 5D (batched) input to conv3d"),
])
def test_a_3d_input_torch_refuses_is_one_located_error(step_file, call, message):
    one_error_at_call(step_file, REFUSED.replace("CALL", call), message)
