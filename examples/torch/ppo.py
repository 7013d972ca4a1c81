"""A PPO update (clipped surrogate) with a Categorical policy from torch.distributions.

The ratio compares the policy with itself before the update: the old log-probabilities
must be constants. `ppo_step` computes them under torch.no_grad(), as the first epoch of
an update does. `ppo_bug` forgets that: the ratio is then exp(logp - logp) = 1 whatever
the weights, and the surrogate's gradient is exactly zero, so the actor learns only from
the entropy bonus. gradflow reports the actor's gradient from the policy loss as zero
where it dies (GF107), and `gradflow check` fails on the step's expectations (GF100).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical


class PPO(nn.Module):
    def __init__(self, old_as_constant: bool = True, clip: float = 0.2):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 3))
        self.critic = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 1))
        self.old_as_constant, self.clip = old_as_constant, clip

    def forward(self, state, action, advantage, returns):
        if self.old_as_constant:
            with torch.no_grad():
                old_logp = Categorical(logits=self.actor(state)).log_prob(action)
        else:
            old_logp = Categorical(logits=self.actor(state)).log_prob(action)
        dist = Categorical(logits=self.actor(state))
        ratio = torch.exp(dist.log_prob(action) - old_logp)
        clipped = ratio.clamp(1 - self.clip, 1 + self.clip)
        policy_loss = -torch.min(ratio * advantage, clipped * advantage).mean()
        value_loss = F.mse_loss(self.critic(state).squeeze(1), returns)
        return {"policy_loss": policy_loss, "value_loss": value_loss, "entropy_bonus": -0.01 * dist.entropy().mean()}


def inputs():
    return torch.randn(16, 6), torch.randint(0, 3, (16,)), torch.randn(16), torch.randn(16)


WRT = {"policy_loss": ["actor.*"], "value_loss": ["critic.*"], "entropy_bonus": ["actor.*"]}
EXPECT = {"policy_loss": {"flows": ["actor.*"], "unreachable": ["critic.*"]},
          "value_loss": {"flows": ["critic.*"], "unreachable": ["actor.*"]},
          "entropy_bonus": {"flows": ["actor.*"]}}


def ppo_step():
    torch.manual_seed(0)
    return {"module": PPO(), "inputs": inputs(), "wrt": WRT, "expect": EXPECT,
            "description": "PPO: the old log-probabilities are constants in the ratio"}


def ppo_bug():
    torch.manual_seed(0)
    return {"module": PPO(old_as_constant=False), "inputs": inputs(), "wrt": WRT, "expect": EXPECT,
            "description": "PPO with the old log-probabilities left differentiable"}
