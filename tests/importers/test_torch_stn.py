"""F.affine_grid and F.grid_sample against PyTorch: align_corners both ways, 4-D and 5-D grids, sizes
of 1, every mode and padding mode gradflow maps, points beyond the input; a spatial transformer
network end to end (localisation net -> theta -> affine_grid -> grid_sample -> classifier), in
float64 and float32; bicubic sampling and inputs torch refuses as one located error each."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:Since version 1.3.0, affine_grid")]

from tests.importers.conftest import check, close_in_float32, one_error_at_call  # noqa: E402
from tests.importers.test_torch_refusals import run_cli  # noqa: E402


GRIDS = """
class Grids(nn.Module):
    def __init__(self):
        super().__init__()
        # no point lands on an entry (where bilinear's gradient jumps, and rounding picks the side)
        self.theta = nn.Parameter(torch.tensor([[[0.91, 0.23, 0.13], [-0.31, 1.07, 0.057]],
                                                [[1.37, 0.03, -0.19], [0.11, 0.73, 0.29]]]))   # the second zooms out
        self.theta3 = nn.Parameter(torch.eye(3, 4)[None] + 0.1 * torch.randn(1, 3, 4))

    def forward(self, img, vol):
        w = torch.arange(1.0, 6.0)
        return {"grids": (F.affine_grid(self.theta, (2, 3, 4, 5), align_corners=False) * w[:2]).sum()
                         + F.affine_grid(self.theta, (2, 1, 7, 1), align_corners=True).square().sum()
                         + F.affine_grid(self.theta, (2, 1, 1, 3), align_corners=False).sin().sum(),
                "volume": (F.affine_grid(self.theta3, (1, 2, 3, 4, 2), align_corners=True) * w[:3]).sum()
                          + F.affine_grid(self.theta3, (1, 2, 2, 3, 4), align_corners=False).square().sum(),
                "sampled": sum(F.grid_sample(img, F.affine_grid(self.theta, (2, 3, 5, 4), align_corners=align),
                                             mode=mode, padding_mode=pad, align_corners=align).square().sum()
                               for mode in ("bilinear", "nearest") for pad in ("zeros", "border", "reflection")
                               for align in (False, True)),
                "volume_sampled": F.grid_sample(vol, F.affine_grid(self.theta3, (1, 2, 3, 4, 3), align_corners=False),
                                                align_corners=False).square().sum()
                                  + F.grid_sample(vol, F.affine_grid(self.theta3, (1, 2, 2, 2, 2), align_corners=True),
                                                  padding_mode="border", align_corners=True).sin().sum()}


def step():
    torch.manual_seed(0)
    return {"module": Grids(), "inputs": (torch.randn(2, 3, 6, 7), torch.randn(1, 2, 3, 4, 5))}
"""


def test_affine_grid_and_grid_sample_in_every_mode_give_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(GRIDS)
    check(path, "step", same_as_torch)


STN = """
class STN(nn.Module):
    '''A spatial transformer (Jaderberg et al.): a localisation net predicts an affine theta, started at
    the identity; the input is resampled through it, then classified.'''
    def __init__(self):
        super().__init__()
        self.loc = nn.Sequential(nn.Conv2d(1, 4, 3), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 6))
        nn.init.zeros_(self.loc[-1].weight)
        with torch.no_grad():
            self.loc[-1].bias.copy_(torch.tensor([0.93, 0.11, 0.047, -0.13, 0.87, 0.021]))   # near the identity
        self.classify = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                                      nn.Flatten(), nn.Linear(16, 3))

    def forward(self, img, label):
        theta = self.loc(img).view(-1, 2, 3)
        grid = F.affine_grid(theta, img.size(), align_corners=False)
        warped = F.grid_sample(img, grid, align_corners=False)
        return {"loss": F.cross_entropy(self.classify(warped), label)}


def step():
    torch.manual_seed(0)
    return {"module": STN(), "inputs": (torch.randn(2, 1, 10, 10), torch.tensor([2, 0])),
            "expect": {"loss": {"flows": ["loc.4.*", "classify.*"], "zero": ["loc.0.*"]}}}
"""


def test_a_spatial_transformer_network_gives_torch_gradients_into_its_localisation_net(step_file, same_as_torch):
    path, _ = step_file(STN)
    report = check(path, "step", same_as_torch)
    # the localisation net's last layer starts at zero weights: its own gradient comes through theta, and
    # the layers before it get none (as torch's zeros), which the step's expect states
    assert report.status("loc.4.weight", "loss") == "flows" and report.status("loc.0.weight", "loss") == "zero"
    assert run_cli("check", f"{path}:step").exit_code == 0


@pytest.mark.parametrize("body", [GRIDS, STN], ids=["grids", "stn"])
def test_imported_grids_and_samples_run_in_float32_close_to_torch(step_file, body):
    close_in_float32(step_file(body)[0])


REFUSED = """
class Refused(nn.Module):
    def __init__(self):
        super().__init__()
        self.theta = nn.Parameter(torch.eye(2, 3)[None])

    def forward(self, img):
        theta = self.theta
        return {"loss": CALL.sum()}  # @call


def step():
    return {"module": Refused(), "inputs": (torch.randn(1, 1, 4, 4),)}
"""


@pytest.mark.parametrize("call, message", [
    ("F.grid_sample(img, F.affine_grid(theta, (1, 1, 3, 3), align_corners=False), mode='bicubic', "
     "align_corners=False)", "unsupported op aten.grid_sampler.default with mode='bicubic'"),
    ("F.affine_grid(theta, (1, 1, 3, 3, 3), align_corners=False)", "Expected a batch of 3D affine matrices"),
    ("F.grid_sample(img, torch.zeros(2, 3, 3, 2), align_corners=False)", "could not capture the step"),
])
def test_a_grid_torch_refuses_or_gradflow_does_not_map_is_one_located_error(step_file, call, message):
    one_error_at_call(step_file, REFUSED.replace("CALL", call), message)
