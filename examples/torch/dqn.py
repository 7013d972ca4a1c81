"""A DQN step: the TD target comes from a target network under torch.no_grad(),
so only the online Q-network learns from the TD error."""

import torch
import torch.nn as nn
import torch.nn.functional as F


def q_net() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))


class DQNStep(nn.Module):
    def __init__(self, gamma: float = 0.99):
        super().__init__()
        self.q, self.target = q_net(), q_net()
        self.target.load_state_dict(self.q.state_dict())
        self.gamma = gamma

    def forward(self, state, action, reward, next_state, done):
        q = self.q(state).gather(1, action.unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            best_next = self.target(next_state).max(dim=1).values
            td_target = reward + self.gamma * (1 - done) * best_next
        return {"td_loss": F.mse_loss(q, td_target)}


def dqn_step():
    torch.manual_seed(0)
    batch = (torch.randn(32, 4), torch.randint(0, 2, (32,)), torch.randn(32), torch.randn(32, 4),
             (torch.rand(32) < 0.1).double())
    return {"module": DQNStep(), "inputs": batch,
            "wrt": {"td_loss": ["q.*"]},
            "expect": {"td_loss": {"flows": ["q.*"], "blocked": ["target.*"]}},
            "description": "DQN: TD target from the target network under no_grad"}
