"""What the torch importer cannot translate exactly is one located error, never a silently different model."""

from __future__ import annotations

import pytest

from gradflow.errors import ModelError

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from gradflow.importers import import_python  # noqa: E402  (needs torch present)


def refused(path: str, func: str = "step") -> ModelError:
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:{func}")
    return caught.value


def run_cli(*args):
    from click.testing import CliRunner

    from gradflow.cli.main import cli
    return CliRunner().invoke(cli, list(args))


NESTED = """
class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 1)
        self.b = nn.Linear(4, 1)

    def forward(self, x):
        return {"aux": %s, "main": self.b(x).mean()}


def step():  # @def
    return {"module": Nested(), "inputs": (torch.randn(3, 4),)}
"""


@pytest.mark.parametrize("value, says", [
    ("(self.a(x).mean(), self.a(x).sum())", "loss 'aux' is a tuple"),
    ("[self.a(x).mean()]", "loss 'aux' is a list"),
    ("{'a': self.a(x).mean()}", "loss 'aux' is a dict"),
    ("None", "loss 'aux' is None"),
    ("2.5", "loss 'aux' is a float"),
])
def test_a_loss_that_is_not_one_tensor_is_refused_at_the_def_line(step_file, value, says):
    path, line_of = step_file(NESTED % value)
    e = refused(path)
    assert (e.line, e.col) == (line_of("def"), 1)
    assert e.message.startswith(says) and "one scalar tensor" in e.message


@pytest.mark.parametrize("key, says", [
    ("mse", "loss name 'mse' is the name of one of gradflow's ops: give the loss another key, such as 'mse_loss'"),
    ("loss/total", "loss name 'loss/total' is not an identifier (letters, digits and _): give the loss another "
                   "key, such as 'loss_total'"),
    ("3", "loss name '3' is not an identifier (letters, digits and _): give the loss another key")])
def test_a_loss_name_gradflow_cannot_use_says_why_and_what_would_do(step_file, key, says):
    path, line_of = step_file(NESTED.replace('"aux": %s', f'"{key}": self.a(x).mean()'))
    e = refused(path)
    assert (e.line, e.message) == (line_of("def"), says)


NAMED_LIKE_A_PARAMETER = """
class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))
        self.log_alpha = torch.zeros(1, requires_grad=True)   # trained without nn.Parameter (SAC)

    def forward(self, x):
        return {"%s": (self.scale * x).sum() + self.log_alpha.exp().sum()}


def step():  # @def
    return {"module": Scaled(), "inputs": (torch.randn(3, 4),)}
"""


@pytest.mark.parametrize("key", ["scale", "log_alpha"])
def test_a_loss_named_like_a_parameter_is_refused_at_the_def_line_in_the_users_words(step_file, key):
    # it was "'scale' is defined twice (first at line 7)": a line of the model file the user never saw
    path, line_of = step_file(NAMED_LIKE_A_PARAMETER % key)
    e = refused(path)
    assert (e.line, e.message) == (line_of("def"), f"loss name {key!r} is also the name of a parameter: give the "
                                                   f"loss another key, such as '{key}_loss'")


def test_a_parameter_named_like_an_op_is_refused_at_the_def_line_saying_what_to_rename(step_file):
    # it read "param 'norm' has the name of an op; choose another name", a model file's words
    path, line_of = step_file(NAMED_LIKE_A_PARAMETER.replace("self.scale", "self.norm") % "loss")
    e = refused(path)
    assert (e.line, e.message) == (line_of("def"), "parameter 'norm' has the name of one of gradflow's ops "
                                                   "(`gradflow ops` lists them), which a model cannot give a "
                                                   "parameter: rename self.norm")


@pytest.mark.parametrize("inputs, says", [
    ('{"x": torch.randn(3, 4)}', "step() returned 'inputs' as a dict: gradflow calls module(*inputs), so return "
                                 "the tensors as a tuple in the order forward takes them"),
    ("(torch.randn(3, 4), 2.0)", "step() returned 'inputs' that are not a tuple of tensors")])
def test_inputs_that_are_not_a_tuple_of_tensors_are_refused_at_the_def_line(step_file, inputs, says):
    path, line_of = step_file((NESTED % "self.a(x).mean()").replace("(torch.randn(3, 4),)", inputs))
    e = refused(path)
    assert (e.line, e.message) == (line_of("def"), says)


def test_a_forward_returning_an_empty_dict_says_it_returned_no_losses(step_file):
    path, line_of = step_file(NESTED.replace('{"aux": %s, "main": self.b(x).mean()}', "{}"))
    e = refused(path)
    assert (e.line, e.col) == (line_of("def"), 1)
    assert e.message.startswith("module(*inputs) returned no losses")


def test_a_forward_returning_an_ordered_dict_of_losses_imports_them_in_its_order(step_file):
    import gradflow
    path, _ = step_file(NESTED.replace('{"aux": %s, "main": self.b(x).mean()}',
                                       '__import__("collections").OrderedDict(main=self.b(x).mean(), '
                                       'aux=self.a(x).mean())'))
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    assert [loss.name for loss in report.losses] == ["main", "aux"]


WRITES = """
class Writes(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.Linear(10, 6)
        self.lin = nn.Linear(4, 4)
        self.emb = nn.Embedding(5, 4, max_norm=1.0)

    def rnn(self, x):
        outputs = torch.zeros(2, 3, 6)
        h = torch.zeros(2, 6)
        for t in range(3):
            h = torch.tanh(self.cell(torch.cat([x[:, t], h], -1)))
            outputs[:, t] = h  # @rnn
        return {"loss": outputs.pow(2).mean()}

    def scale(self, x):
        g = self.lin(x[:, 0])
        g[:, :2] *= 0.5  # @scale
        return {"loss": g.pow(2).sum()}

    def pad(self, x):
        logits = self.lin(x[:, 0])
        logits[:, 0] = -1e9  # @pad
        return {"loss": F.cross_entropy(logits, torch.tensor([1, 2]))}

    def embed(self, x):
        return {"loss": self.emb(torch.tensor([0, 3, 3])).sum()}  # @embed

    def forward(self, x):
        return getattr(self, self.which)(x)


def make(which):
    module = Writes()
    module.which = which
    torch.manual_seed(0)
    return {"module": module, "inputs": (torch.randn(2, 3, 4),)}


def rnn():
    return make("rnn")


def scale():
    return make("scale")


def pad():
    return make("pad")


def embed():
    return make("embed")
"""


@pytest.mark.parametrize("func, col, op", [
    ("rnn", 13, "aten.copy_.default"), ("scale", 9, "aten.mul_.Tensor"), ("pad", 9, "aten.fill_.Tensor"),
])
def test_an_in_place_write_read_again_through_another_name_is_refused_at_its_line(step_file, func, col, op):
    path, line_of = step_file(WRITES)
    e = refused(path, func)
    assert (e.line, e.col) == (line_of(func), col)
    assert e.message.startswith(f"unsupported in-place write ({op}) into a tensor that is read again")
    assert "torch.stack, torch.cat or torch.where" in e.message
    result = run_cli("check", f"{path}:{func}")
    assert result.exit_code == 2
    assert result.stderr == f"{path}:{line_of(func)}:{col}: error: {e.message}\n"


def test_embedding_max_norm_renormalising_its_weight_in_place_is_refused_at_the_call(step_file):
    path, line_of = step_file(WRITES)
    e = refused(path, "embed")
    assert (e.line, e.col) == (line_of("embed"), 25)
    assert e.message.startswith("unsupported op aten.embedding_renorm_.default")


def test_in_place_writes_whose_old_value_nobody_reads_still_import_as_torch(step_file, same_as_torch):
    path, _ = step_file("""
    class Fine(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            h = self.lin(x)
            h.add_(1.0)                   # the whole tensor: later reads see the write
            h *= 2.0
            scratch = h.clone()
            scratch[:, 0] = 0.0           # nobody reads scratch again
            v = h[:, :2]
            v.mul_(3.0)                   # read only through v afterwards
            w = self.lin(x)
            w.relu_()
            return {"loss": v.square().sum() + w.sum()}


    def step():
        torch.manual_seed(0)
        return {"module": Fine(), "inputs": (torch.randn(3, 4),)}
    """)
    import gradflow
    same_as_torch(gradflow.analyze(gradflow.load(f"{path}:step")), path, "step")


def test_inference_mode_is_a_cut_at_its_line_like_no_grad(step_file, same_as_torch):
    path, line_of = step_file("""
    class Infer(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 1)

        @torch.inference_mode()
        def encode(self, x):
            return self.a(x)

        def forward(self, x):
            with torch.inference_mode():  # @with
                h = self.a(x)
            with torch.inference_mode(False):
                kept = self.a(x)
            return {"infer": self.b(h.clone()).mean(), "decorated": self.b(self.encode(x).clone()).mean(),
                    "off": self.b(kept).mean()}


    def step():
        torch.manual_seed(0)
        return {"module": Infer(), "inputs": (torch.randn(3, 4),)}
    """)
    import gradflow
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    assert [report.status("a.weight", loss) for loss in ("infer", "decorated", "off")] == \
        ["blocked", "blocked", "flows"]
    same_as_torch(report, path, "step")
    cuts = [line for line in import_python(f"{path}:step").graph if line.expr.startswith("no_grad(")]
    assert (cuts[0].source.line, cuts[0].source.col) == (line_of("with"), 9)
    assert torch.is_inference_mode_enabled() is False
    with torch.inference_mode():   # torch's own inference_mode is itself again afterwards
        assert torch.is_inference_mode_enabled()


ODD = """
class Boom(BaseException):
    pass


class Lin(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        return {"loss": h[x > 0].sum()}  # @mask


class Fine(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 1)

    def forward(self, x, *rest):
        return {"loss": self.lin(x).mean()}


def mask():
    return {"module": Lin(), "inputs": (torch.randn(3, 4),)}


def sparse():  # @sparse
    return {"module": Fine(), "inputs": (torch.randn(3, 4), torch.eye(3).to_sparse())}


def complex_input():  # @complex_input
    return {"module": Fine(), "inputs": (torch.randn(3, 4), torch.randn(3, dtype=torch.complex64))}


def complex_param():  # @complex_param
    module = Fine()
    module.register_buffer("phase", torch.ones(2, dtype=torch.complex64))
    return {"module": module, "inputs": (torch.randn(3, 4),)}


def meta_param():  # @meta_param
    module = Fine()
    module.ghost = nn.Linear(2, 2, device="meta")   # never used: torch runs the step, but it has no values
    return {"module": module, "inputs": (torch.randn(3, 4),)}


class Derived(Fine):
    def __init__(self):
        super().__init__()
        self.scaled = self.lin.weight * 2   # not a leaf: its gradient would reach lin.weight, once

    def forward(self, x, *rest):
        return {"loss": (x @ self.scaled.t()).mean()}


def derived_attr():  # @derived_attr
    return {"module": Derived(), "inputs": (torch.randn(3, 4),)}


def meta_input():  # @meta_input
    return {"module": Fine(), "inputs": (torch.randn(3, 4), torch.empty(2, device="meta"))}


def base():
    raise Boom("stop")  # @base


def ok():
    return {"module": Fine(), "inputs": (torch.randn(3, 4),)}
"""


@pytest.mark.parametrize("func, col, message", [
    ("mask", 25, "unsupported data-dependent shape: the size of what aten.index.Tensor gives depends on tensor values"),
    ("sparse", 1, "sparse() returned input 1 with layout sparse_coo: only dense tensors can be imported"),
    ("complex_input", 1, "complex_input() returned input 1 of dtype complex64: gradflow's values are real"),
    ("complex_param", 1, "complex_param() returned a module whose 'phase' is complex"),
    ("meta_param", 1, "meta_param() returned a module whose 'ghost.weight' is on the meta device, which holds no "
                      "values: move it to the CPU (module.to_empty(device='cpu'), then initialise it) or out of the "
                      "module"),
    ("derived_attr", 1, "the module's tensor 'scaled' was computed from parameters before forward (its grad_fn is "
                        "MulBackward0): torch's backward reaches them through the graph built then, and on the first "
                        "step only; compute it in forward, or make it an nn.Parameter or a buffer"),
    ("meta_input", 1, "meta_input() returned input 1 on the meta device, which holds no values: pass a CPU tensor"),
    ("base", 5, "base() raised Boom: stop"),
])
def test_odd_steps_are_one_located_error_and_the_other_targets_are_still_checked(step_file, func, col, message):
    path, line_of = step_file(ODD)
    result = run_cli("check", f"{path}:{func}", f"{path}:ok")
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()     # no traceback, no warning of gradflow's own
    assert line.startswith(f"{path}:{line_of(func)}:{col}: error: {message}")
    assert "2 models checked: 1 invalid" in result.stdout


def test_a_nan_constant_is_refused_with_words_that_read(step_file):
    path, line_of = step_file("""
    class Nan(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 1)

        def forward(self, x):
            return {"loss": (self.lin(x) * float("nan")).sum()}  # @nan


    def step():
        return {"module": Nan(), "inputs": (torch.randn(3, 4),)}
    """)
    e = refused(path)
    assert (e.line, e.message) == (line_of("nan"), "unsupported op aten.mul.Tensor with a NaN constant")


def test_a_base_exception_at_import_is_located_and_ctrl_c_still_stops(step_file, tmp_path):
    path, line_of = step_file("""
    import pytest
    pytest.importorskip("surely_not_an_installed_module")  # @skip
    """, name="skipped.py")
    result = run_cli("check", f"{path}:step")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"{path}:{line_of('skip')}:1: error: importing {path} raised Skipped: could not import")
    interrupted, _ = step_file("""
    def step():
        raise KeyboardInterrupt
    """, name="interrupted.py")
    with pytest.raises(KeyboardInterrupt):
        import_python(f"{interrupted}:step")


def test_a_parameter_updated_in_place_under_no_grad_in_forward_still_gets_its_gradient(step_file, same_as_torch):
    path, _ = step_file("""
    import copy


    class Updates(nn.Module):
        def __init__(self):
            super().__init__()
            self.critic = nn.Linear(4, 1)
            self.online = nn.Linear(4, 4)
            self.target = copy.deepcopy(self.online).requires_grad_(False)
            with torch.no_grad():
                self.target.weight.mul_(3.0)

        def forward(self, x):
            with torch.no_grad():     # WGAN weight clipping before use
                for p in self.critic.parameters():
                    p.clamp_(-0.01, 0.01)
            with torch.no_grad():     # an EMA of the online network
                for pt, po in zip(self.target.parameters(), self.online.parameters()):
                    pt.mul_(0.5).add_(po, alpha=0.5)
            return {"critic": self.critic(x).mean(),
                    "byol": (self.online(x) - self.target(x * 2)).pow(2).sum()}


    def step():
        torch.manual_seed(0)
        return {"module": Updates(), "inputs": (torch.randn(3, 4),)}
    """)
    import gradflow
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    assert report.status("critic.weight", "critic") == "flows"
    assert report.status("online.weight", "byol") == "flows"
    same_as_torch(report, path, "step")
    # the update's own path is the no_grad block the user wrote, not a stop_gradient of ours
    assert {c.op for p in report.params for pair in p.grads.values() for c in pair.partially_cut_by} == {"no_grad"}


@pytest.mark.parametrize("penalty", [
    "torch.autograd.grad(self.D(real).sum(), real, create_graph=True)[0]",
    "self.D(real).sum().backward(create_graph=True) or real.grad"])
def test_a_gradient_of_a_gradient_in_forward_is_refused_at_its_line(step_file, penalty):
    # WGAN-GP and R1: export fails on them with words about fake tensors, at the def line
    path, line_of = step_file(f"""
    class Penalised(nn.Module):
        def __init__(self):
            super().__init__()
            self.D = nn.Linear(4, 1)

        def forward(self, real):
            real = real.detach().requires_grad_(True)
            grad = {penalty}  # @penalty
            return {{"loss": self.D(real).mean() + grad.pow(2).sum()}}


    def step():
        return {{"module": Penalised(), "inputs": (torch.randn(3, 4),)}}
    """)
    e = refused(path)
    assert e.line == line_of("penalty")
    assert "in the step's forward cannot be imported: gradflow analyses a step's first-order gradients" in e.message


def test_a_batch_norm_averaging_cumulatively_is_refused_saying_so_not_as_a_python_if(step_file):
    # nn.BatchNorm's momentum=None divides by float(num_batches_tracked) in training mode, inside torch:
    # export's words blamed the user's line for an `if` on a tensor's values
    path, line_of = step_file("""
    class Cumulative(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.norm = nn.Linear(3, 4), nn.BatchNorm1d(4, momentum=None)

        def forward(self, x):
            return {"loss": self.norm(self.lin(x)).relu().mean()}  # @norm


    def step():
        return {"module": Cumulative(), "inputs": (torch.randn(8, 3),)}
    """)
    e = refused(path)
    assert e.line == line_of("norm")
    assert e.message == ("a batch norm with momentum=None cannot be imported: its cumulative average reads "
                         "num_batches_tracked as a Python number, which export cannot trace; give momentum a number "
                         "for the check (in training mode it changes only the running statistics, never a gradient)")
