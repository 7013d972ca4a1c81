"""A small CNN classifier with BatchNorm in training mode: batch statistics are part
of the gradient, running statistics are buffers, not parameters.

The convolutions keep their bias, and `gradflow check` warns about it (GF108, norms
near 1e-16): BatchNorm subtracts the batch mean, which removes any constant a bias
adds, so its gradient is zero up to rounding. Such a bias never learns;
`nn.Conv2d(..., bias=False)` is the usual way to leave it out."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class CNN(nn.Module):
    def __init__(self, classes: int = 5):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.head = nn.Linear(8 * 2 * 2, classes)

    def forward(self, images, labels):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(images))), 2)
        h = F.max_pool2d(F.relu(self.bn2(self.conv2(h))), 2)
        return {"loss": F.cross_entropy(self.head(h.flatten(1)), labels)}


def cnn_step():
    torch.manual_seed(0)
    return {"module": CNN(), "inputs": (torch.randn(6, 1, 8, 8), torch.randint(0, 5, (6,))),
            "expect": {"loss": {"flows": ["*"]}},
            "description": "CNN with BatchNorm2d in training mode"}
