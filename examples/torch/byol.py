"""A BYOL step: the online encoder and predictor chase a target encoder that is an
exponential moving average of the online one. The target takes no gradient step
(`requires_grad_(False)`), so gradflow reports it as frozen."""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


class BYOL(nn.Module):
    def __init__(self):
        super().__init__()
        self.online = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 8))
        self.predictor = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
        self.target = copy.deepcopy(self.online).requires_grad_(False)

    def forward(self, view1, view2):
        prediction = self.predictor(self.online(view1))
        projection = self.target(view2)
        loss = 2 - 2 * F.cosine_similarity(prediction, projection, dim=-1).mean()
        return {"byol_loss": loss}


def byol_step():
    torch.manual_seed(0)
    x = torch.randn(16, 10)
    return {"module": BYOL(), "inputs": (x + 0.1 * torch.randn(16, 10), x + 0.1 * torch.randn(16, 10)),
            "wrt": {"byol_loss": ["online.*", "predictor.*"]},
            "expect": {"byol_loss": {"flows": ["online.*", "predictor.*"]}},
            "description": "BYOL: online network and predictor against a frozen EMA target"}
