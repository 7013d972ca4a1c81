"""Steps that draw: torch.distributions (sample, rsample, log_prob, entropy, KL), torch.bernoulli,
torch.multinomial, torch.normal and random fills, against PyTorch given the same draws."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import gradflow  # noqa: E402
from gradflow.errors import ModelError  # noqa: E402


@contextlib.contextmanager
def drawing(values: list):
    """torch.bernoulli, torch.normal and torch.multinomial give ``values`` in turn (gradflow's draws),
    with torch's own gradient rule: none through them."""
    queue = list(values)
    real = {name: getattr(torch, name) for name in ("bernoulli", "normal", "multinomial")}

    def give(*args, **kwargs):
        value = torch.from_numpy(np.array(queue.pop(0)))
        return value if value.dtype == torch.int64 else value.double()
    for name in real:
        setattr(torch, name, give)
    try:
        yield
    finally:
        for name, f in real.items():
            setattr(torch, name, f)
        assert not queue, "every draw of gradflow's was taken"


def analyze_with_torch(path: str, func: str, same_as_torch):
    """The report, checked against torch given the draws gradflow made, in the step's order."""
    model = gradflow.load(f"{path}:{func}")
    report = gradflow.analyze(model)
    draws = [t.value for name, t in model.entries.items() if name.startswith("sample")]
    with drawing(draws):
        same_as_torch(report, path, func)
    return report, draws


ACTOR_CRITIC = """
from torch.distributions import Categorical


class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.pi, self.v = nn.Linear(4, 8), nn.Linear(8, 3), nn.Linear(8, 1)

    def forward(self, obs, ret):
        h = torch.tanh(self.body(obs))
        dist = Categorical(logits=self.pi(h))
        action = dist.sample()  # @sample
        value = self.v(h).squeeze(-1)
        advantage = ret - value
        return {"policy": -(dist.log_prob(action) * advantage.detach()).mean(),
                "leaky_policy": -(dist.log_prob(action) * advantage).mean(),
                "value": advantage.pow(2).mean(),
                "entropy": -dist.entropy().mean()}


def step():
    torch.manual_seed(0)
    return {"module": ActorCritic(), "inputs": (torch.randn(16, 4), torch.randn(16))}
"""


def test_an_actor_critic_with_a_categorical_policy_imports_and_matches_torch_given_its_actions(
        step_file, same_as_torch):
    path, line_of = step_file(ACTOR_CRITIC)
    report, (actions,) = analyze_with_torch(path, "step", same_as_torch)
    assert actions.shape == (16, 1) and actions.dtype == np.int64 and len(np.unique(actions)) > 1
    assert report.status("v.weight", "policy") == "blocked"          # the critic is not trained by the policy
    assert report.status("v.weight", "leaky_policy") == "flows"      # ... unless the advantage is not detached
    cuts = {(c.op, c.node, c.line) for c in report.pair("pi.weight", "policy").partially_cut_by}
    assert ("multinomial", "sample", line_of("sample")) in cuts
    assert not [f for f in report.findings if f.rule == "GF106"]


GAUSSIAN = """
from torch.distributions import Independent, Normal, kl_divergence


class Gaussian(nn.Module):
    def __init__(self):
        super().__init__()
        self.mu = nn.Linear(4, 2)
        self.log_std = nn.Parameter(torch.tensor([0.3, -0.2]))

    def forward(self, obs, adv):
        dist = Independent(Normal(self.mu(obs), self.log_std.exp()), 1)
        prior = Independent(Normal(torch.zeros(2), torch.ones(2)), 1)
        action = dist.sample()  # @sample
        z = dist.rsample()
        return {"pg": -(dist.log_prob(action) * adv).mean(),
                "through_sample": action.pow(2).sum(),  # @through
                "reparam": z.pow(2).sum(),
                "kl": kl_divergence(dist, prior).mean(),
                "entropy": dist.entropy().sum()}


def step():
    torch.manual_seed(0)
    return {"module": Gaussian(), "inputs": (torch.randn(8, 4), torch.randn(8))}
"""


def test_a_gaussian_policy_samples_without_gradient_and_reparameterises_with_it(step_file, same_as_torch):
    path, line_of = step_file(GAUSSIAN)
    model = gradflow.load(f"{path}:step")
    report = gradflow.analyze(model)
    action = model.entries["sample"].value
    assert action.shape == (8, 2) and action.std() > 0.3
    for param in ("mu.weight", "mu.bias", "log_std"):
        assert report.status(param, "through_sample") == "blocked"
        assert report.status(param, "reparam") == "flows"
    cut = report.pair("log_std", "through_sample").cut_by
    assert [(c.op, c.kind, c.node, c.line) for c in cut] == [("normal", "implicit", "sample", line_of("sample"))]
    gf110 = [f for f in report.findings if f.rule == "GF110"]
    assert [(f.loss, f.line) for f in gf110] == [("through_sample", line_of("through"))]
    assert "cut by normal in sample" in gf110[0].message
    assert not [f for f in report.findings if f.rule == "GF106"]   # torch's own no_grad in sample()
    # rsample's noise is gradflow's own draw (a constant, as randn_like): torch's numbers on the rest
    with drawing([action]):
        same_as_torch(report, path, "step", only={"pg", "through_sample", "kl", "entropy"})


DRAWS = """
from torch.distributions import Bernoulli


@torch.no_grad()
def hard(p):
    return (p > 0.5).float() + p * 0   # the user's own helper under no_grad: their cut


class Draws(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        h = self.lin(x)
        p = torch.sigmoid(h)
        gate = Bernoulli(logits=h)
        g = gate.sample()  # @gate
        with torch.no_grad():  # @with
            coin = torch.bernoulli(p)
        picks = torch.multinomial(p, 2)                       # without replacement: two classes a row
        noise = torch.normal(h, 0.5) + torch.normal(0.0, p)   # @normal
        even = torch.bernoulli(h, 0.5)
        return {"gate": -(gate.log_prob(g)).sum(),
                "coin": (h * coin).sum() + (h * even).sum(),
                "picked": torch.gather(h, 1, picks).sum(),
                "noise": (noise * h).sum(),
                "hard": (hard(p) * h).sum()}  # @hard


def step():
    torch.manual_seed(0)
    return {"module": Draws(), "inputs": (torch.randn(6, 4),)}
"""


def test_torch_draws_import_as_gradflow_draws_and_match_torch_given_them(step_file, same_as_torch):
    path, line_of = step_file(DRAWS)
    report, draws = analyze_with_torch(path, "step", same_as_torch)
    gate, coin, picks, noise_a, noise_b, even = draws
    assert {np.unique(d).tolist() == [0.0, 1.0] for d in (gate, coin, even)} == {True}
    assert picks.shape == (6, 2) and all(a != b for a, b in picks)
    assert noise_a.shape == noise_b.shape == (6, 3)
    cuts = [(s.cut.op, s.cut.node.startswith("sample"), s.cut.line) for s in report.stops]
    # the user's own no_grad around a draw is redundant, as the draw cuts anyway; torch's in sample() is
    # not theirs and not there: Bernoulli's draw is the cut, at the user's line
    assert [f.line for f in report.findings if f.rule == "GF106"] == [line_of("with")]
    assert ("no_grad", False, line_of("hard")) in cuts                   # @torch.no_grad() on their helper
    assert [c for c in cuts if c[0] == "no_grad" and c[1]] == []
    assert ("bernoulli", True, line_of("gate")) in cuts
    assert {line for op, _, line in cuts if op == "normal"} == {line_of("normal")}


def test_a_dropout_mask_drawn_by_bernoulli_fill_is_drawn_once_at_import(step_file):
    from gradflow.importers import import_python
    from gradflow.importers.torch.target import load_step
    path, _ = step_file("""
    class Drop(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 50)

        def forward(self, x):
            h = self.lin(x)
            mask = torch.empty_like(h).bernoulli_(0.8)
            return {"loss": (h * mask / 0.8).pow(2).sum()}


    def step():
        torch.manual_seed(0)
        return {"module": Drop(), "inputs": (torch.randn(40, 4),)}
    """)
    mask = import_python(f"{path}:step").arrays["bernoulli_0"]   # "bernoulli" is an op's name
    assert mask.shape == (40, 50) and set(np.unique(mask)) == {0.0, 1.0} and abs(mask.mean() - 0.8) < 0.03
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    step = load_step(path, "step")
    h = step.module.double().lin(step.inputs[0].double())
    expected = (h * torch.from_numpy(mask) / 0.8).pow(2).sum().item()
    assert report.losses[0].value == pytest.approx(expected, rel=1e-12)


def test_a_distribution_that_checks_its_arguments_is_refused_at_its_line_and_checks_are_restored(step_file):
    path, line_of = step_file("""
    class Checked(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)

        def forward(self, x):
            dist = torch.distributions.Categorical(logits=self.lin(x), validate_args=True)  # @checked
            return {"loss": -dist.entropy().mean()}


    def step():
        return {"module": Checked(), "inputs": (torch.randn(2, 4),)}
    """)
    default = torch.distributions.Distribution._validate_args
    with pytest.raises(ModelError) as error:
        gradflow.load(f"{path}:step")
    assert error.value.line == line_of("checked")
    assert "checks its arguments' values (validate_args=True)" in error.value.message
    assert "pass validate_args=False" in error.value.message
    assert torch.distributions.Distribution._validate_args is default


ODD = """
class Odd(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.lin, self.kind = nn.Linear(4, 3), kind

    def forward(self, x):
        h = self.lin(x)
        if self.kind == "generator":
            keep = torch.bernoulli(torch.sigmoid(h), generator=torch.Generator().manual_seed(1))
        elif self.kind == "mask":
            keep = torch.empty_like(h).bernoulli_((h > 0).float())   # p of 0 or 1: the draw is (h > 0)
        elif self.kind == "many":
            keep = torch.multinomial(torch.softmax(h, -1), 5).float().sum() * h   # @many
        else:
            keep = torch.normal(h, -torch.ones(3))  # @negative
        return {"loss": (h * keep).sum()}


def step(kind):
    torch.manual_seed(0)
    return {"module": Odd(kind), "inputs": (torch.randn(6, 4),)}


def generator():
    return step("generator")


def mask():
    return step("mask")


def many():
    return step("many")


def negative():
    return step("negative")
"""


def test_a_draw_given_a_generator_or_a_tensor_of_probabilities_in_place_imports(step_file):
    from gradflow.importers.torch.target import load_step
    path, _ = step_file(ODD)
    report = gradflow.analyze(gradflow.load(f"{path}:generator"))
    assert report.status("lin.weight", "loss") == "flows"
    report = gradflow.analyze(gradflow.load(f"{path}:mask"))
    module = load_step(path, "mask").module.double()
    h = module.lin(load_step(path, "mask").inputs[0].double())
    assert report.losses[0].value == pytest.approx(torch.relu(h).sum().item(), rel=1e-12)


@pytest.mark.parametrize("func, message", [
    ("many", "multinomial cannot draw 5 of 3 classes without replacement"),
    ("negative", "std must be >= 0")])
def test_a_draw_torch_would_refuse_is_an_error_at_the_users_line(step_file, func, message):
    path, line_of = step_file(ODD)
    with pytest.raises(ModelError) as error:
        gradflow.analyze(gradflow.load(f"{path}:{func}"))
    assert (error.value.path, error.value.line, error.value.message) == (path, line_of(func), message)
