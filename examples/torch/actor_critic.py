"""An advantage actor-critic step: the policy loss weighs log-probabilities by the
advantage, which must be detached so that the policy loss does not train the critic.

`actor_critic_step` detaches it. `actor_critic_bug` forgets to: the policy loss then
sends gradient into the critic, silently fighting the critic's own loss. With the same
expectations as the right step, `gradflow check` fails on it (GF100: the critic is
meant to be blocked from the policy loss) and warns that the gradient leaves the
policy loss's wrt (GF104).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ActorCritic(nn.Module):
    def __init__(self, detach: bool = True):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 3))
        self.critic = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 1))
        self.detach = detach

    def forward(self, state, action, reward):
        logp = F.log_softmax(self.actor(state), dim=-1)
        chosen = logp.gather(1, action.unsqueeze(1)).squeeze(1)
        value = self.critic(state).squeeze(1)
        advantage = reward - value
        if self.detach:
            advantage = advantage.detach()
        policy_loss = -(advantage * chosen).mean()
        critic_loss = F.mse_loss(value, reward)
        return {"policy_loss": policy_loss, "critic_loss": critic_loss}


def inputs():
    return torch.randn(16, 6), torch.randint(0, 3, (16,)), torch.randn(16)


WRT = {"policy_loss": ["actor.*"], "critic_loss": ["critic.*"]}
EXPECT = {"policy_loss": {"flows": ["actor.*"], "blocked": ["critic.*"]},
          "critic_loss": {"flows": ["critic.*"], "unreachable": ["actor.*"]}}


def actor_critic_step():
    torch.manual_seed(0)
    return {"module": ActorCritic(), "inputs": inputs(), "wrt": WRT, "expect": EXPECT,
            "description": "A2C: the advantage is detached in the policy loss"}


def actor_critic_bug():
    torch.manual_seed(0)
    return {"module": ActorCritic(detach=False), "inputs": inputs(), "wrt": WRT, "expect": EXPECT,
            "description": "A2C with the advantage's detach forgotten"}
