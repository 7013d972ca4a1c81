"""A VQ-VAE step: the encoder's output snaps to its nearest codebook vector (argmin:
no gradient), and the straight-through estimator `z + (z_q - z).detach()` copies
the decoder's gradient back to the encoder. The codebook learns from its own loss,
the encoder also from the commitment loss."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class VQVAE(nn.Module):
    def __init__(self, dim: int = 8, codes: int = 16, latent: int = 4):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, latent))
        self.codebook = nn.Embedding(codes, latent)
        self.decoder = nn.Sequential(nn.Linear(latent, 32), nn.ReLU(), nn.Linear(32, dim))

    def forward(self, x):
        z = self.encoder(x)
        distances = (z.unsqueeze(1) - self.codebook.weight.unsqueeze(0)).pow(2).sum(-1)
        codes = distances.argmin(dim=1)
        z_q = self.codebook(codes)
        straight = z + (z_q - z).detach()
        return {"recon_loss": F.mse_loss(self.decoder(straight), x),
                "codebook_loss": F.mse_loss(z_q, z.detach()),
                "commit_loss": 0.25 * F.mse_loss(z, z_q.detach())}


def vqvae_step():
    torch.manual_seed(0)
    return {"module": VQVAE(), "inputs": (torch.randn(16, 8),),
            "wrt": {"recon_loss": ["encoder.*", "decoder.*"], "codebook_loss": ["codebook.*"],
                    "commit_loss": ["encoder.*"]},
            "expect": {"recon_loss": {"flows": ["encoder.*", "decoder.*"], "blocked": ["codebook.*"]},
                       "codebook_loss": {"flows": ["codebook.*"], "blocked": ["encoder.*"]}},
            "description": "VQ-VAE with a straight-through estimator around the codebook lookup"}
