"""In-place writes as torch runs them: a tensor written in place is read afterwards with its new value,
however it is named (itself, a view taken before, .detach(), .data), with gradient as torch's autograd
gives it; a write that cannot be translated exactly is one located error."""

from __future__ import annotations

import re

import pytest

from gradflow.errors import ModelError

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from gradflow.importers import import_python  # noqa: E402  (needs torch present)
from tests.importers.conftest import check  # noqa: E402

WRITTEN = """
class Written(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 3))
        self.lin = nn.Linear(4, 3)
        self.target = nn.Linear(4, 3)
        with torch.no_grad():
            self.target.weight.mul_(3.0)

    @torch.no_grad()
    def clip(self):
        self.w.clamp_(-0.1, 0.1)

    def forward(self, x):
%s


def step():  # @def
    torch.manual_seed(0)
    return {"module": Written(), "inputs": (torch.randn(2, 4),)}
"""

# the loss's gradient into w depends on w's value: a read of the old value would show
LOSS = "return {'loss': (x @ self.w).pow(2).sum() + self.lin(x).sum()}"

FAITHFUL = {
    "clamp": ["with torch.no_grad():  # @with", "    self.w.clamp_(-0.1, 0.1)  # @write", LOSS],
    "mul_add": ["with torch.no_grad():  # @with", "    self.w.mul_(0.5).add_(0.25)  # @write", LOSS],
    "copy": ["with torch.no_grad():  # @with", "    self.w.copy_(self.w.clamp(-0.1, 0.1))  # @write", LOSS],
    "copy_broadcast": ["with torch.no_grad():  # @with", "    self.w.copy_(self.lin.bias)  # @write", LOSS],
    "fill": ["with torch.no_grad():  # @with", "    self.w.fill_(0.3)  # @write", LOSS],
    "zero": ["with torch.no_grad():  # @with", "    self.w.zero_()  # @write", LOSS],
    "decorated": ["self.clip()  # @write", LOSS],
    "init": ["nn.init.constant_(self.w, 0.3)  # @write", LOSS],
    "detach_no_grad": ["with torch.no_grad():  # @with", "    self.w.detach().clamp_(-0.1, 0.1)  # @write", LOSS],
    "data_no_grad": ["with torch.no_grad():  # @with", "    self.w.data.clamp_(-0.1, 0.1)  # @write", LOSS],
    "detach": ["self.w.detach().clamp_(-0.1, 0.1)  # @write", LOSS],
    "data": ["self.w.data.clamp_(-0.1, 0.1)  # @write", LOSS],
    "data_loop": ["for p in self.parameters():", "    p.data.clamp_(-0.1, 0.1)  # @write", LOSS],
    "view_before": ["wt = self.w.t()", "with torch.no_grad():  # @with", "    self.w.mul_(0.5)  # @write",
                    "return {'loss': (wt @ x.t()).pow(2).sum() + self.lin(x).sum()}"],
    "detach_before": ["d = self.w.detach()", "with torch.no_grad():  # @with", "    self.w.mul_(0.5)  # @write",
                      "return {'loss': (x @ self.w).pow(2).sum() * d.sum()}"],
    "read_before_and_after": ["a = x @ self.w", "with torch.no_grad():  # @with", "    self.w.mul_(0.5)  # @write",
                              "return {'loss': (a * (x @ self.w)).sum()}"],
    "detach_before_written": ["d = self.w.detach()", "with torch.no_grad():", "    self.w.mul_(0.5)",
                              "d.clamp_(-0.1, 0.1)  # @write", LOSS],
    "views_across_blocks": ["v = self.w[0]", "with torch.no_grad():", "    self.w.mul_(2.0)", "v2 = self.w[1]",
                            "with torch.no_grad():  # @with", "    self.w.add_(1.0)  # @write",
                            "return {'loss': (v * v2).sum() + (x @ self.w).pow(2).sum()}"],
    "two_blocks": ["with torch.no_grad():", "    self.w.mul_(0.5)", "h = (x @ self.w).pow(2).sum()",
                   "with torch.no_grad():  # @with", "    self.w.add_(1.0)  # @write",
                   "return {'loss': h + (x @ self.w).pow(2).sum()}"],
    "ema_data": ["for pt, po in zip(self.target.parameters(), self.lin.parameters()):",
                 "    pt.data.mul_(0.5).add_(po.data, alpha=0.5)  # @write",
                 "return {'loss': (self.lin(x) * self.target(x)).sum()}"],
    "sync_data": ["for pt, po in zip(self.target.parameters(), self.lin.parameters()):",
                  "    pt.data.copy_(po.data)  # @write",
                  "return {'loss': (self.lin(x) * self.target(x)).sum()}"],
    "ema_no_grad_data": ["with torch.no_grad():  # @with",
                         "    for pt, po in zip(self.target.parameters(), self.lin.parameters()):",
                         "        pt.copy_(0.5 * pt + 0.5 * po.data)  # @write",
                         "return {'loss': (self.lin(x) * self.target(x)).sum()}"],
    # a view of all of w in another shape: the write is all of w's memory, laid out as torch lays it
    "flat_view": ["with torch.no_grad():  # @with", "    self.w.view(-1).clamp_(-0.1, 0.1)  # @write", LOSS],
    "reshape": ["with torch.no_grad():  # @with", "    self.w.reshape(2, 6).mul_(0.5).add_(0.25)  # @write", LOSS],
    "flatten_detach": ["self.w.detach().flatten().clamp_(-0.1, 0.1)  # @write", LOSS],
    "unsqueeze_data": ["self.w.data.unsqueeze(0).mul_(torch.arange(1.0, 4.0))  # @write", LOSS],
    "view_before_flat": ["wt = self.w.t()", "with torch.no_grad():  # @with", "    self.w.view(-1).mul_(0.5)  # @write",
                         "return {'loss': (wt @ x.t()).pow(2).sum() + self.lin(x).sum()}"],
}


def written(step_file, lines):
    return step_file(WRITTEN % "\n".join(" " * 8 + line for line in lines))


@pytest.mark.parametrize("case", list(FAITHFUL))
def test_a_parameter_written_in_place_is_read_with_its_new_value_and_keeps_its_gradient_as_torch(
        step_file, same_as_torch, case):
    path, _ = written(step_file, FAITHFUL[case])
    check(path, "step", same_as_torch)


@pytest.mark.parametrize("case, op, marker", [
    ("clamp", "no_grad", "with"), ("detach_no_grad", "no_grad", "with"), ("data_no_grad", "no_grad", "with"),
    ("detach", "stop_gradient", "write"), ("data", "stop_gradient", "write"),
    ("view_before", "no_grad", "with"), ("init", "no_grad", "write"),
])
def test_the_written_parameter_gets_its_new_value_through_the_cut_the_user_wrote(step_file, case, op, marker):
    path, line_of = written(step_file, FAITHFUL[case])
    imported = import_python(f"{path}:step")
    (update,) = [line for line in imported.graph if line.expr.startswith(f"w + {op}(")]
    assert update.source.line == line_of(marker)
    assert update.targets == ("w_updated",)   # the written tensor's name, which a finding may quote
    # after the update nothing reads w but through it, and the user's .detach() / .data is that one cut
    reads = [i for i, line in enumerate(imported.graph) if "w" in re.findall(r"[\w.]+", line.expr)]
    assert max(reads) == imported.graph.index(update)
    assert not [line for line in imported.graph if line.expr.startswith("stop_gradient(")]


def test_a_view_taken_before_a_write_into_its_base_reads_the_new_value_as_torch(step_file, same_as_torch):
    path, _ = step_file("""
    class BaseView(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            h = self.lin(x)
            y = h.t()
            h.relu_()                     # y is a view of h: it reads relu(h), and its gradient
            return {"loss": (y * 2).sum()}


    def step():
        torch.manual_seed(0)
        return {"module": BaseView(), "inputs": (torch.randn(2, 4),)}
    """)
    check(path, "step", same_as_torch)


PARTIAL = {
    "row": (["with torch.no_grad():", "    self.w[0].mul_(0.5)  # @write", LOSS], 13, "aten.mul_.Tensor"),
    "slice": (["with torch.no_grad():", "    self.w[:, :2] = 0.0  # @write", LOSS], 13, "aten.fill_.Tensor"),
    "data_row": (["self.w.data[0].zero_()  # @write", LOSS], 9, "aten.zero_.default"),
}


@pytest.mark.parametrize("case", list(PARTIAL))
def test_a_write_into_part_of_a_parameter_read_again_is_refused_at_the_write(step_file, case):
    from click.testing import CliRunner

    from gradflow.cli.main import cli
    lines, col, op = PARTIAL[case]
    path, line_of = written(step_file, lines)
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:step")
    e = caught.value
    assert (e.line, e.col) == (line_of("write"), col)
    assert e.message.startswith(f"unsupported in-place write ({op}) into part of parameter 'w', which is read "
                                "again afterwards")
    assert "write all of it instead" in e.message
    result = CliRunner().invoke(cli, ["check", f"{path}:step"])
    assert result.exit_code == 2
    assert result.stderr == f"{path}:{line_of('write')}:{col}: error: {e.message}\n"


def test_a_write_through_a_transposed_view_of_a_parameter_read_again_says_view_not_part(step_file):
    lines = ["wt = self.w.t()", "with torch.no_grad():", "    wt.mul_(0.5)  # @write", LOSS]
    path, line_of = written(step_file, lines)
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:step")
    e = caught.value
    assert (e.line, e.col) == (line_of("write"), 13)
    assert e.message.startswith("unsupported in-place write (aten.mul_.Tensor) into parameter 'w' through a view "
                                "of it") and "part of" not in e.message


def test_a_write_through_a_reshape_that_copies_is_refused_not_read_as_written(step_file):
    # reshape of a transposed tensor is a copy: torch's write leaves w as it was
    lines = ["with torch.no_grad():", "    self.w.t().reshape(-1).mul_(0.5)  # @write", LOSS]
    path, line_of = written(step_file, lines)
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:step")
    assert caught.value.line == line_of("write")
    assert caught.value.message.startswith("unsupported in-place write (aten.mul_.Tensor) into parameter 'w' "
                                           "through a view of it (a transpose, a permute)")


def test_writes_with_gradient_through_views_of_all_of_a_tensor_are_read_through_every_name_as_torch(
        step_file, same_as_torch):
    path, _ = step_file("""
    class Flat(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.w = nn.Linear(4, 6), nn.Parameter(torch.randn(12))

        def forward(self, x):
            h = self.lin(x)                     # [2, 6]
            f = h.view(-1)
            f.mul_(self.w)                      # h is now h * w, each entry by its own weight
            g = h.unsqueeze(0)
            g.add_(1.0)
            h.reshape(3, 4).tanh_()             # f and g read it too
            return {"loss": (h * torch.arange(12.0).view(2, 6)).sum() + f.sum() + (g ** 2).sum()}


    def step():
        torch.manual_seed(0)
        return {"module": Flat(), "inputs": (torch.randn(2, 4),)}
    """)
    check(path, "step", same_as_torch)


def test_c51s_projection_written_through_a_flat_view_imports_as_torch(step_file, same_as_torch):
    path, _ = step_file("""
    class C51(nn.Module):
        def __init__(self, atoms=11):
            super().__init__()
            self.net, self.target = nn.Linear(4, 2 * atoms), nn.Linear(4, 2 * atoms).requires_grad_(False)
            self.atoms = atoms
            self.register_buffer("support", torch.linspace(-5.0, 5.0, atoms))
            self.register_buffer("action", torch.tensor([0, 1, 1, 0, 1, 0]))

        def forward(self, obs, reward, next_obs):
            B, A = obs.shape[0], self.atoms
            with torch.no_grad():
                p = F.softmax(self.target(next_obs).view(B, 2, A), -1)
                p = p[torch.arange(B), (p * self.support).sum(2).argmax(1)]
                b = ((reward.unsqueeze(1) + 0.9 * self.support).clamp(-5.0, 5.0) + 5.0) / 1.0
                low, up = b.floor().long(), b.ceil().long()
                m = torch.zeros_like(p)
                offset = (torch.arange(B) * A).unsqueeze(1).expand(B, A)
                m.view(-1).index_add_(0, (low + offset).view(-1), (p * (up.float() - b)).view(-1))
                m.view(-1).index_add_(0, (up + offset).view(-1), (p * (b - low.float())).view(-1))
            log_p = F.log_softmax(self.net(obs).view(B, 2, A), -1)[torch.arange(B), self.action]
            return {"loss": -(m * log_p).sum(1).mean()}


    def step():
        torch.manual_seed(0)
        return {"module": C51(), "inputs": (torch.randn(6, 4), torch.randn(6) * 2, torch.randn(6, 4))}
    """)
    check(path, "step", same_as_torch)


@pytest.mark.parametrize("lines, col, message", [
    # with gradient on, torch itself refuses to write into a leaf that requires grad
    (["self.w.clamp_(-0.1, 0.1)  # @write", LOSS], 9,
     "torch.export could not capture the step: RuntimeError: a leaf Variable that requires grad is being used "
     "in an in-place operation."),
    (["self.w.data = self.w.data.clamp(-0.1, 0.1)  # @write", LOSS], 9,
     "assigning '.data' cannot be imported (export does not record it); write the new value in place instead"),
    (["self.w.data = torch.ones(4, 3)  # @write", LOSS], 9, "assigning '.data' cannot be imported"),
    (["return {'loss': (x @ self.w.data).sum() + self.lin(x).sum()}  # @write"], 30,
     "'.data' cannot be imported (export turns it into a constant); use '.detach()' to cut the gradient"),
])
def test_what_torch_or_gradflow_cannot_run_is_one_located_error_at_its_line(step_file, lines, col, message):
    from click.testing import CliRunner

    from gradflow.cli.main import cli
    path, line_of = written(step_file, lines)
    result = CliRunner().invoke(cli, ["check", f"{path}:step"])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"{path}:{line_of('write')}:{col}: error: {message}")


def test_a_redundant_no_grad_around_a_write_into_an_input_is_named_after_the_input(step_file, same_as_torch):
    path, line_of = written(step_file, ["with torch.no_grad():  # @with", "    x.mul_(2.0)",
                                        "    x.add_(1.0)", LOSS])
    imported = import_python(f"{path}:step")
    assert [line.targets for line in imported.graph if "no_grad(" in line.expr] == [("x_updated",)]
    # the step is run again to check its backward: on a copy, so x is written once, not twice
    check(path, "step", same_as_torch)
    from click.testing import CliRunner

    from gradflow.cli.main import cli
    result = CliRunner().invoke(cli, ["check", f"{path}:step"])
    assert f"{path}:{line_of('with')}:9: warning: no_grad in x_updated cuts no parameter" in result.output


def test_an_update_nothing_reads_afterwards_is_left_out(step_file):
    path, _ = written(step_file, ["h = (x @ self.w).pow(2).sum()", "with torch.no_grad():",
                                  "    self.w.copy_(torch.ones(4, 3))", "    self.w[0] = 0.0",
                                  "return {'loss': h}"])
    imported = import_python(f"{path}:step")
    assert [line.expr for line in imported.graph] == ["x @ w", "matmul_0 ** 2", "sum(pow_1)"]


SAVED_THEN_WRITTEN = """
class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.D = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, real, fake):
        print("forward")
        d_loss = self.D(fake).mean() - self.D(real).mean()  # @saved
        with torch.no_grad():
            for p in self.D.parameters():
                p.clamp_(-0.01, 0.01)  # clipped after the loss was computed from them
        return {"d_loss": d_loss}


def step():  # @def
    torch.manual_seed(0)
    return {"module": Critic(), "inputs": (torch.randn(8, 4), torch.randn(8, 4))}
"""


def test_a_value_saved_for_backward_then_written_in_place_is_torchs_backward_error_at_the_line_saving_it(step_file):
    from importlib import util

    from click.testing import CliRunner

    from gradflow.cli.main import cli
    path, line_of = step_file(SAVED_THEN_WRITTEN)
    spec = util.spec_from_file_location("critic", path)
    critic = util.module_from_spec(spec)
    spec.loader.exec_module(critic)
    made = critic.step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        made["module"](*made["inputs"])["d_loss"].backward()   # torch itself refuses this step
    result = CliRunner().invoke(cli, ["check", f"{path}:step"])
    assert result.exit_code == 2
    assert result.stderr == ("forward\n"   # the user's print, once: the rerun's is not shown
                             f"{path}:{line_of('saved')}:40: error: D.2.weight, saved here for the backward pass, "
                             "is written in place later in forward, so torch's backward fails ('one of the "
                             "variables needed for gradient computation has been modified by an inplace "
                             "operation'); write it after the backward, or write into a .clone()\n")


def test_a_step_whose_writes_torch_can_run_is_rerun_on_a_copy_silently(step_file, same_as_torch):
    # the check reruns the step: the real weights keep their values, what forward prints shows once
    from click.testing import CliRunner

    import gradflow
    from gradflow.cli.main import cli
    path, _ = written(step_file, ["print('forward')"] + FAITHFUL["ema_data"])
    result = CliRunner().invoke(cli, ["check", f"{path}:step"])
    assert result.stderr == "forward\n" and result.exit_code == 1   # w is unused: a GF102 error
    same_as_torch(gradflow.analyze(gradflow.load(f"{path}:step")), path, "step")
