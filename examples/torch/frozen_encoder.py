"""Fine-tuning a trainable head on a frozen pretrained encoder (`requires_grad_(False)`).
The encoder is reported as frozen; only the head is trained."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(12, 32), nn.GELU(), nn.Linear(32, 16), nn.LayerNorm(16))
        self.encoder.requires_grad_(False)
        self.head = nn.Linear(16, 4)

    def forward(self, x, labels):
        return {"loss": F.cross_entropy(self.head(self.encoder(x)), labels)}


def finetune_step():
    torch.manual_seed(0)
    return {"module": Classifier(), "inputs": (torch.randn(10, 12), torch.randint(0, 4, (10,))),
            "wrt": {"loss": ["head.*"]},
            "expect": {"loss": {"flows": ["head.*"]}},
            "description": "a trainable head on a frozen pretrained encoder"}
