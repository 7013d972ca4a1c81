"""Image ops against PyTorch: interpolate / Upsample (nearest, nearest-exact, linear, bilinear,
trilinear; sizes and scale factors, up and down, both align_corners), pixel_shuffle, unfold,
adaptive max pooling, instance_norm, embedding_bag and cdist; values and gradients compared,
each loss a weighted sum so that every output entry's gradient differs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import gradflow  # noqa: E402
from gradflow.errors import ModelError  # noqa: E402
from gradflow.importers import import_python  # noqa: E402
from tests.importers.conftest import check, same_values_as_torch  # noqa: E402

WEIGH = """
def weigh(y):
    # every output entry its own weight, so that a wrong source shows in the gradient
    return (y * torch.cos(torch.arange(y.numel(), dtype=y.dtype) * 1.3).reshape(y.shape)).sum()

"""


NEAREST = WEIGH + """
class Nearest(nn.Module):
    def __init__(self):
        super().__init__()
        self.img = nn.Parameter(torch.randn(2, 3, 5, 7))
        self.seq = nn.Parameter(torch.randn(2, 3, 5))
        self.vol = nn.Parameter(torch.randn(1, 2, 3, 4, 5))
        self.long = nn.Parameter(torch.randn(1, 2, 30))
        self.up = nn.Upsample(scale_factor=2)

    def forward(self, x):
        img, seq = self.img * x, self.seq
        return {"twice": weigh(self.up(img)) + weigh(F.interpolate(img, scale_factor=3)),
                "sized": weigh(F.interpolate(img, size=(8, 11))) + weigh(F.interpolate(img, size=(13, 9))),
                "down": weigh(F.interpolate(img, size=(3, 4))) + weigh(F.interpolate(img, size=(2, 3)))
                        + weigh(F.interpolate(img, scale_factor=0.5)),
                "factor": weigh(F.interpolate(img, scale_factor=1.7)) + weigh(F.interpolate(img, scale_factor=(2.5, 0.6))),
                "exact": weigh(F.interpolate(img, size=(8, 11), mode="nearest-exact"))
                         + weigh(F.interpolate(img, size=(3, 4), mode="nearest-exact"))
                         + weigh(F.interpolate(img, scale_factor=2, mode="nearest-exact")),
                "line": weigh(F.interpolate(seq, size=9)) + weigh(F.interpolate(seq, scale_factor=2))
                        + weigh(F.interpolate(seq, size=3, mode="nearest-exact")) + weigh(F.interpolate(seq, size=1)),
                "volume": weigh(F.interpolate(self.vol, size=(4, 7, 3))),
                # sizes where the source position, floored in float32 as torch's, is another entry
                "rounding": weigh(F.interpolate(self.long, size=22))
                            + weigh(F.interpolate(self.long[..., :18], size=33, mode="nearest-exact"))}


def step():
    torch.manual_seed(0)
    return {"module": Nearest(), "inputs": (torch.randn(1, 3, 1, 1),)}
"""


def test_import_nearest_interpolation_gives_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(NEAREST)
    check(path, "step", same_as_torch)


LINEAR = WEIGH + """
class Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.img = nn.Parameter(torch.randn(2, 3, 5, 7))
        self.seq = nn.Parameter(torch.randn(2, 3, 5))
        self.row = nn.Parameter(torch.randn(1, 2, 1, 4))
        self.vol = nn.Parameter(torch.randn(1, 2, 3, 4, 5))
        self.long = nn.Parameter(torch.randn(1, 2, 13))

    def forward(self):
        img, seq, row = self.img, self.seq, self.row
        losses = {}
        for align in (False, True):
            name = "aligned" if align else "centred"
            bi = dict(mode="bilinear", align_corners=align)
            losses[name + "_up"] = weigh(F.interpolate(img, size=(8, 11), **bi)) \\
                + weigh(F.interpolate(img, scale_factor=2, **bi)) + weigh(F.interpolate(img, size=(5, 9), **bi))
            losses[name + "_down"] = weigh(F.interpolate(img, size=(3, 4), **bi)) \\
                + weigh(F.interpolate(img, size=(1, 2), **bi)) + weigh(F.interpolate(img, scale_factor=0.5, **bi))
            losses[name + "_factor"] = weigh(F.interpolate(img, scale_factor=1.7, **bi)) \\
                + weigh(F.interpolate(img, scale_factor=(2.5, 0.6), **bi))
            losses[name + "_thin"] = weigh(F.interpolate(row, size=(3, 9), **bi))
            losses[name + "_line"] = weigh(F.interpolate(seq, size=9, mode="linear", align_corners=align)) \\
                + weigh(F.interpolate(seq, size=2, mode="linear", align_corners=align)) \\
                + weigh(F.interpolate(seq, size=5, mode="linear", align_corners=align)) \\
                + weigh(F.interpolate(self.long, size=23, mode="linear", align_corners=align))
            losses[name + "_volume"] = weigh(F.interpolate(self.vol, size=(4, 7, 3), mode="trilinear", align_corners=align))
        return losses


def step():
    torch.manual_seed(0)
    return {"module": Linear(), "inputs": ()}
"""


def test_import_nearest_reads_torch_forward_sources_where_its_float64_backward_rounds_otherwise(step_file):
    # 26 -> 22: torch's float64 forward reads entry 13 for output 11, its backward sends that
    # output's gradient to entry 12 (float32's rounding); gradflow's is the forward's source
    path, _ = step_file(WEIGH + """
class Odd(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Parameter(torch.randn(1, 2, 26))

    def forward(self):
        return {"odd": weigh(F.interpolate(self.seq, size=22))}


def step():
    torch.manual_seed(0)
    return {"module": Odd(), "inputs": ()}
""")
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    same_values_as_torch(report, path, "step")
    assert report.grad("seq", "odd")[0, 0, 12] == 0


def test_import_linear_and_bilinear_interpolation_give_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(LINEAR)
    check(path, "step", same_as_torch)


LAYOUT = WEIGH + """
class Layout(nn.Module):
    def __init__(self):
        super().__init__()
        self.img = nn.Parameter(torch.randn(2, 8, 6, 5))
        self.up, self.down = nn.PixelShuffle(2), nn.PixelUnshuffle(2)
        self.unfold = nn.Unfold(kernel_size=(2, 3), dilation=(2, 1), padding=1, stride=(1, 2))

    def forward(self):
        img = self.img
        values, where = F.adaptive_max_pool2d(img, (3, 5), return_indices=True)
        line, spot = F.adaptive_max_pool1d(img[:, :, 0], 1, return_indices=True)
        return {"shuffle": weigh(self.up(img)) + weigh(F.pixel_shuffle(img[0], 2)),
                "unshuffle": weigh(self.down(img[:, :, :, :4])) + weigh(self.down(self.up(img)) - img),
                "unfold": weigh(self.unfold(img)) + weigh(F.unfold(img, 3)) + weigh(F.unfold(img[0], 2, stride=2)),
                "pooled": weigh(values) + weigh(F.adaptive_max_pool2d(img.round(), (2, 1))) + weigh(line)
                          + weigh(F.adaptive_max_pool2d(img, 1)) + weigh(F.adaptive_max_pool1d(img.round()[..., 0], 3)),
                "indices": weigh(where.double() + 0 * values) + weigh(spot.double() + 0 * line)}


def step():
    torch.manual_seed(0)
    return {"module": Layout(), "inputs": ()}
"""


def test_import_pixel_shuffle_unfold_and_adaptive_max_pool_give_torch_values_and_gradients(
        step_file, same_as_torch):
    path, _ = step_file(LAYOUT)
    check(path, "step", same_as_torch)


NORMS = WEIGH + """
class Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.img = nn.Parameter(torch.randn(2, 3, 4, 5))
        self.plain, self.affine = nn.InstanceNorm2d(3), nn.InstanceNorm2d(3, affine=True, eps=1e-3)
        self.tracked, self.line = nn.InstanceNorm2d(3, affine=True, track_running_stats=True), nn.InstanceNorm1d(3)
        with torch.no_grad():
            self.affine.weight.uniform_(0.5, 2.0)
            self.affine.bias.uniform_(-1.0, 1.0)
            self.tracked.running_mean.uniform_(-1.0, 1.0)

    def forward(self):
        img = self.img
        self.tracked.eval()
        stats = weigh(self.tracked(img))
        self.tracked.train()
        return {"plain": weigh(self.plain(img)) + weigh(F.instance_norm(img[:, :, 0])) + weigh(self.line(img[:, :, 1])),
                "affine": weigh(self.affine(img)) + weigh(self.tracked(img * 2)),
                "running": stats}


def step():
    torch.manual_seed(0)
    return {"module": Norms(), "inputs": ()}
"""


def test_import_instance_norm_gives_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(NORMS)
    check(path, "step", same_as_torch)


BAGS = WEIGH + """
class Bags(nn.Module):
    def __init__(self):
        super().__init__()
        self.sum, self.mean = nn.EmbeddingBag(10, 3, mode="sum"), nn.EmbeddingBag(10, 3, mode="mean")
        self.padded = nn.EmbeddingBag(10, 3, mode="mean", padding_idx=2)
        self.points = nn.Parameter(torch.randn(2, 5, 3))

    def forward(self, idx, offsets, grid):
        w = torch.linspace(0.5, 2.0, idx.numel(), dtype=self.sum.weight.dtype)
        pts = self.points
        near = torch.cat([pts[:, :2], pts[:, 3:] + 1], 1)   # rows 0 and 1 of pts: at zero distance
        return {"summed": weigh(self.sum(idx, offsets)) + weigh(self.sum(idx, offsets, per_sample_weights=w))
                          + weigh(self.sum(grid)),
                "averaged": weigh(self.mean(idx, offsets)) + weigh(self.padded(idx, offsets))
                            + weigh(F.embedding_bag(idx, self.mean.weight, torch.cat([offsets, offsets[-1:] + 3]),
                                                    mode="mean", include_last_offset=True)),
                "distance": weigh(torch.cdist(pts, near)) + weigh(torch.cdist(pts[0], pts[1, :4]))}


def step():
    torch.manual_seed(0)
    return {"module": Bags(), "inputs": (torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 2, 2, 5]),
                                         torch.tensor([[1, 2, 3], [2, 2, 0]]))}
"""


def test_import_embedding_bag_and_cdist_give_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(BAGS)
    report = check(path, "step", same_as_torch)
    assert report.status("points", "distance") == "flows"


UNET = WEIGH + """
class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1, self.enc2 = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 8, 3, padding=1)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.dec = nn.Conv2d(12, 4, 3, padding=1)
        self.out = nn.Conv2d(4, 2, 1)

    def forward(self, x, y):
        skip = torch.relu(self.enc1(x))                          # [2, 4, 7, 9]
        deep = torch.relu(self.enc2(F.max_pool2d(skip, 2)))      # [2, 8, 3, 4]
        up = F.interpolate(self.up(deep), size=skip.shape[-2:], mode="nearest")
        h = torch.relu(self.dec(torch.cat([up, skip], 1)))
        logits = self.out(h)
        return {"seg": F.cross_entropy(logits, y), "smooth": weigh(F.interpolate(logits, scale_factor=0.5,
                                                                                 mode="bilinear"))}


def step():
    torch.manual_seed(0)
    return {"module": Decoder(), "inputs": (torch.randn(2, 3, 7, 9), torch.randint(0, 2, (2, 7, 9)))}
"""


def test_import_unet_decoder_with_upsampling_and_skip_gives_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(UNET)
    report = check(path, "step", same_as_torch)
    assert report.status("enc2.weight", "seg") == "flows"


REFUSED = """
class Refused(nn.Module):
    def __init__(self):
        super().__init__()
        self.pts = nn.Parameter(torch.randn(30, 3))

    def forward(self):
        return {"far": torch.cdist(self.pts, self.pts).sum()}   # @mm


def step():
    return {"module": Refused(), "inputs": ()}
"""


def test_import_cdist_by_a_matrix_product_is_refused_at_its_line(step_file):
    path, line_of = step_file(REFUSED)
    with pytest.raises(ModelError) as e:
        gradflow.load(f"{path}:step")
    assert e.value.line == line_of("mm") and "donot_use_mm_for_euclid_dist" in str(e.value)


LONG = WEIGH + """
class Long(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Parameter(torch.randn(1, 2, 1500))

    def forward(self):
        return {"long": weigh(F.interpolate(self.seq, size=2300, mode="linear"))}


def step():
    torch.manual_seed(0)
    return {"module": Long(), "inputs": ()}
"""


def test_import_interpolation_to_a_long_axis_writes_its_constants_in_pieces(step_file, same_as_torch):
    """2300 weights and source indices are longer than one expression may be: each constant is
    stacked in pieces, a line each, and concatenated."""
    path, _ = step_file(LONG)
    check(path, "step", same_as_torch)
    names = {line.targets[0] for line in import_python(f"{path}:step").graph}
    assert {"upsample_linear1d_weight0_00", "upsample_linear1d_weight0_01", "upsample_linear1d_weight0_0"} <= names


UNFOLDED = """
class Patches(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.conv = nn.Linear(4, 8), nn.Conv2d(1, 2, 1)

    def forward(self, x, image):
        tokens = self.embed((x * 2).unfold(-1, 4, 2)).relu()            # PatchTST: overlapping patches
        apart = self.embed(x.unfold(2, 4, 4) * 3)                       # windows apart: a slice
        tiles = self.conv(image).unfold(2, 3, 3).unfold(3, 3, 3)        # image tiles [B, 2, 2, 2, 3, 3]
        middle = self.conv(image)[:, 0].unfold(1, 2, 1)                 # windows of a middle axis
        weights = torch.arange(tiles.numel(), dtype=tiles.dtype).reshape(tiles.shape)
        return {"loss": tokens.mean() + apart.pow(2).mean() + (tiles * weights).sum() + middle.pow(2).sum()}


def step():
    torch.manual_seed(0)
    return {"module": Patches(), "inputs": (torch.randn(2, 3, 10), torch.randn(2, 1, 6, 6))}
"""


def test_tensor_unfold_gives_torch_values_and_gradients_for_windows_that_overlap_or_not(step_file, same_as_torch):
    path, _ = step_file(UNFOLDED)
    check(path, "step", same_as_torch)
