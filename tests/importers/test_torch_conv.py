"""Convolutions and pools against PyTorch: conv1d, grouped and depthwise convolutions, dilation,
string padding, transposed convolutions (output_padding, groups), max and average pools with
padding, ceil_mode and dilation (count_include_pad both ways, divisor_override), ties in max pools, 1-D
pools and adaptive pools; a ResNet stem and a DCGAN generator block end to end. Values and
gradients compared."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from tests.importers.conftest import check  # noqa: E402


CONVS = """
class Convs(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(3, 4, 3, stride=2, padding=1)
        self.c1_depth = nn.Conv1d(3, 6, 4, groups=3, dilation=2, padding="same")
        self.depth = nn.Conv2d(4, 4, 7, padding=3, groups=4)             # ConvNeXt's depthwise 7x7
        self.grouped = nn.Conv2d(4, 6, 3, stride=2, groups=2)            # ResNeXt's
        self.dilated = nn.Conv2d(4, 2, (3, 2), stride=(1, 2), padding=(2, 1), dilation=(2, 3))
        self.same = nn.Conv2d(4, 3, (4, 3), padding="same", bias=False)  # an even kernel: one more after
        self.valid = nn.Conv2d(4, 2, 2, padding="valid", groups=2)

    def forward(self, seq, img):
        h = self.depth(img)                                              # [2, 4, 7, 9]
        return {"conv1d": self.c1(seq).square().sum() + self.c1_depth(seq).sin().sum()
                          + F.conv1d(seq, self.c1.weight, stride=3).square().sum(),
                "grouped": self.grouped(h).square().sum() + self.dilated(h).sin().sum(),
                "same": self.same(img).square().sum() + self.valid(img).cos().sum()
                        + F.conv2d(img[0], self.same.weight, padding=(1, 2)).square().sum()}


def step():
    torch.manual_seed(0)
    return {"module": Convs(), "inputs": (torch.randn(2, 3, 11), torch.randn(2, 4, 7, 9))}
"""


def test_import_conv1d_grouped_dilated_and_same_padded_convolutions_give_torch_values_and_gradients(
        step_file, same_as_torch):
    path, _ = step_file(CONVS)
    check(path, "step", same_as_torch)


TRANSPOSED = """
class Transposed(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 3, 4, stride=2, padding=1)                    # DCGAN's
        self.odd = nn.ConvTranspose2d(4, 2, 3, stride=(2, 3), padding=1, output_padding=(1, 2))
        self.dilated = nn.ConvTranspose2d(4, 2, 3, dilation=2, padding=(1, 5))        # 5 > 2 (3 - 1): cropped
        self.grouped = nn.ConvTranspose2d(4, 6, (2, 3), stride=2, groups=2, bias=False)
        self.seq = nn.ConvTranspose1d(3, 2, 3, stride=2, output_padding=1)

    def forward(self, img, seq):
        return {"up": self.up(img).square().sum() + self.odd(img).sin().sum(),
                "dilated": self.dilated(img).square().sum() + self.grouped(img).cos().sum(),
                "seq": self.seq(seq).square().sum()
                       + F.conv_transpose1d(seq, self.seq.weight, padding=1).sin().sum()
                       + F.conv_transpose2d(img, self.up.weight, stride=3).square().sum()}


def step():
    torch.manual_seed(0)
    return {"module": Transposed(), "inputs": (torch.randn(2, 4, 3, 9), torch.randn(2, 3, 5))}
"""


def test_import_transposed_convolutions_give_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(TRANSPOSED)
    check(path, "step", same_as_torch)


POOLS = """
class Pools(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.seq = nn.Conv1d(2, 3, 1)

    def forward(self, img, seq):
        h, s = self.conv(img), self.seq(seq)                                   # [2, 3, 7, 6], [2, 3, 9]
        return {"maxed": F.max_pool2d(h, 3, 2, padding=1).square().sum()
                       + F.max_pool2d(h, 2, ceil_mode=True).sin().sum()                  # 7 = 2 * 3 + 1
                       + F.max_pool2d(h, (3, 2), (2, 3), padding=(1, 1), ceil_mode=True).square().sum(),
                "averaged": F.avg_pool2d(h, 3, 2, padding=1).square().sum()
                       + F.avg_pool2d(h, 3, 2, padding=1, count_include_pad=False).sin().sum()
                       + F.avg_pool2d(h, 2, ceil_mode=True).square().sum(),
                "overhang": F.avg_pool2d(h, 3, 2, padding=1, ceil_mode=True).square().sum()
                            + F.avg_pool2d(h, (2, 3), (2, 2), padding=(1, 0), ceil_mode=True,
                                           count_include_pad=False).sin().sum()
                            + F.avg_pool2d(h, 3, 2, padding=1, ceil_mode=True, divisor_override=2).square().sum(),
                "seq": F.max_pool1d(s, 3, 2, padding=1, ceil_mode=True).square().sum()
                       + F.avg_pool1d(s, 2, 2, padding=1, ceil_mode=True).sin().sum()
                       + F.avg_pool1d(s, 4, 3, padding=2, count_include_pad=False, ceil_mode=True).square().sum()
                       + F.adaptive_avg_pool1d(s, 4).square().sum() + F.adaptive_avg_pool1d(s, 3).sin().sum(),
                "adaptive": F.adaptive_avg_pool2d(h, (3, 4)).square().sum()
                            + F.adaptive_avg_pool2d(h, (7, 4)).sin().sum(),
                "dilated": F.max_pool2d(h, 2, dilation=2).square().sum()
                           + F.max_pool2d(h, (3, 2), (1, 2), padding=(1, 1), dilation=(2, 3),
                                          ceil_mode=True).sin().sum()
                           + F.max_pool1d(s, 3, 2, padding=1, dilation=3, ceil_mode=True).square().sum()}


def step():
    torch.manual_seed(0)
    return {"module": Pools(), "inputs": (torch.randn(2, 2, 7, 6), torch.randn(2, 2, 9))}
"""


def test_import_pools_with_padding_ceil_mode_and_count_include_pad_give_torch_values_and_gradients(
        step_file, same_as_torch):
    path, _ = step_file(POOLS)
    check(path, "step", same_as_torch)


TIES = """
class Ties(nn.Module):
    def __init__(self):
        super().__init__()
        self.flat = nn.Parameter(torch.ones(1, 2, 5, 5))       # every window a tie
        self.line = nn.Parameter(torch.full((2, 7), 0.5))
        self.register_buffer("scale", torch.arange(1.0, 10.0).reshape(3, 3))

    def forward(self):
        x = self.flat
        return {"padded": (F.max_pool2d(x, 3, 2, padding=1) * self.scale).sum(),
                "ceiled": (F.max_pool2d(x, 2, 2, ceil_mode=True) * self.scale).sum()
                        + (F.max_pool2d(x, 3, 1, padding=1)[..., :3, :3] * self.scale).sum(),
                "seq": (F.max_pool1d(self.line, 3, 2, padding=1, ceil_mode=True) * torch.arange(4.0)).sum(),
                "dilated": (F.max_pool2d(x, 2, 1, padding=1, dilation=2)[..., :3, :3] * self.scale).sum()}


def step():
    return {"module": Ties(), "inputs": ()}
"""


def test_import_max_pool_ties_give_the_gradient_to_the_first_entry_of_the_window_as_torch(step_file, same_as_torch):
    path, _ = step_file(TIES)
    report = check(path, "step", same_as_torch)
    # the ResNet stem's pool: windows start at -1, 1 and 3, each picking its first entry in the input
    assert report.grad("flat", "padded")[0, 0, 0].tolist() == [1.0, 2.0, 0.0, 3.0, 0.0]
    # taps 2 apart: windows 0 and 2 of a row read columns (-1, 1) and (1, 3), window 1 reads (0, 2);
    # each gives its first tap in the input all of the gradient (rows alike: 0 and 2 go to row 1)
    assert report.grad("flat", "dilated")[0, 0, 1].tolist() == [2.0 + 8.0, 1.0 + 3.0 + 7.0 + 9.0, 0.0, 0.0, 0.0]


NETS = """
class Stem(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 7, stride=2, padding=3, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(3, 2, padding=1)
        self.block = nn.Conv2d(8, 8, 3, padding=1, groups=4)

    def forward(self, x):
        h = self.pool(F.relu(self.bn(self.conv(x))))
        return F.adaptive_avg_pool2d(F.relu(self.block(h)) + h, 1).flatten(1)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.ConvTranspose2d(6, 8, 4, 1, 0, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                 nn.ConvTranspose2d(8, 4, 4, 2, 1, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
                                 nn.ConvTranspose2d(4, 3, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.net(z)


class Nets(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.gen, self.head = Stem(), Generator(), nn.Linear(8, 2)

    def forward(self, img, y, z):
        fake = self.gen(z)                                       # [2, 3, 16, 16]
        return {"classify": F.cross_entropy(self.head(self.stem(img)), y),
                "generate": self.head(self.stem(fake)).square().mean()}


def step():
    torch.manual_seed(0)
    return {"module": Nets(), "inputs": (torch.randn(2, 3, 19, 17), torch.tensor([0, 1]), torch.randn(2, 6, 1, 1))}
"""


def test_import_a_resnet_stem_and_a_dcgan_generator_give_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(NETS)
    check(path, "step", same_as_torch)
