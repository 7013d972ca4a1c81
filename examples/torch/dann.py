"""Domain-adversarial training (DANN): a gradient-reversal layer between the feature
extractor and the domain classifier makes the features domain-invariant while
the domain classifier still learns to tell the domains apart."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class GradientReversal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return -ctx.alpha * grad, None


class DANN(nn.Module):
    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU())
        self.classifier = nn.Linear(16, 3)
        self.domain = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
        self.alpha = alpha

    def forward(self, source, labels, target):
        f_source, f_target = self.features(source), self.features(target)
        class_loss = F.cross_entropy(self.classifier(f_source), labels)
        both = torch.cat([f_source, f_target])
        domain_labels = torch.cat([torch.zeros(len(source)), torch.ones(len(target))])
        logits = self.domain(GradientReversal.apply(both, self.alpha)).squeeze(1)
        domain_loss = F.binary_cross_entropy_with_logits(logits, domain_labels)
        return {"class_loss": class_loss, "domain_loss": domain_loss}


def dann_step():
    torch.manual_seed(0)
    return {"module": DANN(), "inputs": (torch.randn(8, 8), torch.randint(0, 3, (8,)), torch.randn(8, 8) + 1),
            "expect": {"class_loss": {"flows": ["features.*", "classifier.*"], "unreachable": ["domain.*"]},
                       "domain_loss": {"flows": ["features.*", "domain.*"], "unreachable": ["classifier.*"]}},
            "description": "DANN: gradient reversal between features and the domain classifier"}
