"""A GAN training step: the discriminator learns on real and detached fake samples,
the generator learns through the discriminator.

`gan_step` is right. `gan_step_bug` detaches the discriminator's output in the
generator loss (`D(fake).detach()`), a bug that trains nothing: the generator
never receives a gradient, and `gradflow check` points at the `.detach()` line.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.LeakyReLU(0.2), nn.Linear(hidden, outputs))


class GANStep(nn.Module):
    def __init__(self, bug: bool = False):
        super().__init__()
        self.G = mlp(4, 16, 2)
        self.D = mlp(2, 16, 1)
        self.bug = bug

    def forward(self, z, real):
        fake = self.G(z)
        d_real, d_fake = self.D(real), self.D(fake.detach())
        d_loss = F.softplus(-d_real).mean() + F.softplus(d_fake).mean()
        if self.bug:
            score = self.D(fake).detach()
        else:
            score = self.D(fake)
        g_loss = F.softplus(-score).mean()
        return {"d_loss": d_loss, "g_loss": g_loss}


def inputs():
    return torch.randn(8, 4), torch.randn(8, 2) + 2.0


def gan_step():
    torch.manual_seed(0)
    return {"module": GANStep(), "inputs": inputs(),
            "wrt": {"d_loss": ["D.*"], "g_loss": ["G.*"]},
            "expect": {"d_loss": {"flows": ["D.*"], "blocked": ["G.*"]},
                       "g_loss": {"flows": ["G.*", "D.*"]}},
            "description": "GAN step: D on real and detached fakes, G through D"}


def gan_step_bug():
    torch.manual_seed(0)
    return {"module": GANStep(bug=True), "inputs": inputs(),
            "wrt": {"d_loss": ["D.*"], "g_loss": ["G.*"]},
            "description": "GAN step with D(fake).detach() in the generator loss"}
