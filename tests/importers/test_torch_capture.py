"""The torch importer's capture and mapping: names, leaves, cuts and their places, refusals."""

from __future__ import annotations

import warnings

import pytest

from gradflow.errors import ModelError

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from gradflow.importers import import_python  # noqa: E402  (needs torch present)
from tests.conftest import ROOT  # noqa: E402

GAN = """
class Step(nn.Module):
    def __init__(self):
        super().__init__()
        self.G = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        self.D = nn.Linear(2, 1)
        self.D.bias.requires_grad_(False)

    def forward(self, z, labels):
        fake = self.G(z)
        with torch.no_grad():  # @with
            score = self.D(fake) * 2
        d = self.D(fake.detach())  # @detach
        return {"d_loss": (d + score).mean(), "ce": F.cross_entropy(fake, labels)}


def step():  # @def
    return {"module": Step(), "inputs": (torch.randn(5, 4), torch.randint(0, 2, (5,))),
            "wrt": {"d_loss": ["D.*"]}, "expect": {"ce": {"flows": ["G.*"]}}, "description": "a GAN step"}
"""


def line_named(imported, name):
    return next(line for line in imported.graph if name in line.targets)


def test_import_keeps_parameter_names_dtypes_and_frozen(step_file):
    path, _ = step_file(GAN)
    imported = import_python(f"{path}:step")
    assert [(p.name, p.shape, p.frozen) for p in imported.params] == [
        ("G.0.weight", (8, 4), False), ("G.0.bias", (8,), False), ("G.2.weight", (2, 8), False),
        ("G.2.bias", (2,), False), ("D.weight", (1, 2), False), ("D.bias", (1,), True)]
    assert [(t.name, t.shape, t.dtype) for t in imported.inputs] == [("z", (5, 4), "float"),
                                                                  ("labels", (5,), "int")]
    assert imported.arrays["G.0.weight"].dtype.name == "float64"
    assert imported.arrays["labels"].dtype.name == "int64"
    assert imported.losses == {"d_loss": ["D.*"], "ce": None}
    assert imported.expect == {"ce": {"flows": ["G.*"]}}
    assert imported.description == "a GAN step"


def test_import_detach_is_stop_gradient_and_no_grad_is_cut_at_the_with_line(step_file):
    path, line_of = step_file(GAN)
    imported = import_python(f"{path}:step")
    stops = [line for line in imported.graph if line.expr.startswith(("stop_gradient(", "no_grad("))]
    assert [(line.expr.split("(")[0], line.source.line, line.source.col) for line in stops] == [
        ("no_grad", line_of("with"), 9), ("stop_gradient", line_of("detach"), 20)]
    assert imported.source.line == line_of("def")


def test_a_tensor_made_in_forward_is_a_constant_not_a_stop_the_user_never_wrote(step_file):
    # export traces torch.tensor(2.0) as lift_fresh_copy then detach_: that detach is export's
    path, _ = step_file("""
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, x):
            return {"loss": (self.lin(x) * torch.tensor(2.0)).sum() + self.lin.bias @ torch.tensor([1.0, 3.0])}


    def step():
        return {"module": Scaled(), "inputs": (torch.randn(4, 3),)}
    """)
    imported = import_python(f"{path}:step")
    assert not [line.expr for line in imported.graph if "stop_gradient" in line.expr]
    result = run_cli("check", f"{path}:step")
    assert result.exit_code == 0 and "GF106" not in result.output, result.output


def test_a_detach_the_user_wrote_of_a_buffer_stays_a_cut_that_gf106_finds_redundant(step_file):
    # only export's detach_ of torch.tensor(...) is folded away; the user's own .detach() is an explicit cut
    path, line_of = step_file("""
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)
            self.register_buffer("scale", torch.ones(2))

        def forward(self, x):
            return {"loss": (self.lin(x) * self.scale.detach()).sum()}  # @detach


    def step():
        return {"module": Scaled(), "inputs": (torch.randn(4, 3),)}
    """)
    imported = import_python(f"{path}:step")
    assert [line.expr for line in imported.graph if "stop_gradient" in line.expr] == ["stop_gradient(scale)"]
    result = run_cli("check", f"{path}:step")
    assert f"{path}:{line_of('detach')}:" in result.output and "GF106" in result.output, result.output


def test_import_yaml_carries_source_places_relative_to_the_model_folder(step_file, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # a project that keeps its imported models in out/
    path, line_of = step_file(GAN)
    text = import_python(f"{path}:step").to_yaml(str(tmp_path / "out"))
    assert f'source: "../step.py:{line_of("def")}:1"' in text
    assert f'source: "../step.py:{line_of("detach")}:20"' in text
    assert "D.bias: {shape: [1], frozen: true" in text
    assert "labels: {shape: [5], dtype: int" in text


def test_import_yaml_source_outside_the_working_directory_stays_absolute(step_file, tmp_path):
    path, line_of = step_file(GAN)
    text = import_python(f"{path}:step").to_yaml(str(tmp_path / "out"))
    assert f'source: "{path}:{line_of("def")}:1"' in text


def test_import_tied_parameter_is_one_parameter_under_its_first_name(step_file):
    path, _ = step_file("""
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(7, 4)
            self.head = nn.Linear(4, 7, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, idx):
            return {"loss": self.head(self.emb(idx)).logsumexp(-1).mean()}


    def step():
        return {"module": Tied(), "inputs": (torch.tensor([1, 2, 3]),)}
    """)
    imported = import_python(f"{path}:step")
    assert [p.name for p in imported.params] == ["emb.weight"]
    assert "embedding(idx, emb.weight)" in [line.expr for line in imported.graph]


def test_import_buffers_are_not_parameters_and_their_updates_are_left_out(step_file):
    path, _ = step_file("""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 4)
            self.bn = nn.BatchNorm1d(4)

        def forward(self, x):
            return {"loss": self.bn(self.lin(x)).square().mean()}


    def step():
        return {"module": Net(), "inputs": (torch.randn(6, 3),)}
    """)
    imported = import_python(f"{path}:step")
    assert [p.name for p in imported.params] == ["lin.weight", "lin.bias", "bn.weight", "bn.bias"]
    assert [t.name for t in imported.inputs] == ["x"]
    assert not any("running" in line.expr or "num_batches" in line.expr for line in imported.graph)


FUNCTIONS = """
class Reverse(torch.autograd.Function):
    # gradient reversal written another common way: a copy forward, a negated scale backward
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.save_for_backward(torch.tensor(alpha))
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        (alpha,) = ctx.saved_tensors
        return grad.neg() * alpha, None


class StraightRound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.round()

    @staticmethod
    def backward(ctx, grad):
        return grad


class Odd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad * grad


class Net(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.lin, self.kind = nn.Linear(3, 3), kind

    def forward(self, x):
        h = self.lin(x)
        if self.kind == "reverse":
            y = Reverse.apply(h, 1.0)  # @reverse
        elif self.kind == "scale":
            y = Reverse.apply(h, 0.25)
        elif self.kind == "straight":
            y = StraightRound.apply(h)
        else:
            y = Odd.apply(h)  # @odd
        return {"loss": y.sum()}


def reverse():
    return {"module": Net("reverse"), "inputs": (torch.randn(2, 3),)}


def scale():
    return {"module": Net("scale"), "inputs": (torch.randn(2, 3),)}


def straight():
    return {"module": Net("straight"), "inputs": (torch.randn(2, 3),)}


def odd():
    return {"module": Net("odd"), "inputs": (torch.randn(2, 3),)}
"""


@pytest.mark.parametrize("func, expr", [
    ("reverse", "grad_reverse(LINEAR)"),
    ("scale", "grad_scale(LINEAR, -0.25)"),
    ("straight", r"LINEAR + stop_gradient(ROUND - LINEAR)"),
])
def test_import_custom_function_is_classified_by_its_backward(step_file, func, expr):
    path, line_of = step_file(FUNCTIONS)
    imported = import_python(f"{path}:{func}")
    exprs = [line.expr for line in imported.graph]
    # entries take export's node names, made unique against op names (`linear` is an op)
    linear = next(line.targets[0] for line in imported.graph if line.targets[0].startswith("linear"))
    rounded = next((line.targets[0] for line in imported.graph if line.expr == f"round({linear})"), None)
    expr = expr.replace("ROUND", str(rounded)).replace("LINEAR", linear)
    assert expr in exprs
    if func == "reverse":
        line = imported.graph[exprs.index(expr)]
        assert (line.source.line, line.source.col) == (line_of("reverse"), 17)


def test_import_unknown_custom_function_is_one_located_error_naming_it(step_file):
    path, line_of = step_file(FUNCTIONS)
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:odd")
    e = caught.value
    assert (e.line, e.col) == (line_of("odd"), 17)
    assert "custom autograd Function 'Odd' cannot be analysed" in e.message


PAIRS = """
class Pair(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        return a.clone(), b.clone()

    @staticmethod
    def backward(ctx, ga, gb):
        return 2 * ga, gb


class Halves(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return [x.clone(), x.clone()]

    @staticmethod
    def backward(ctx, g1, g2):
        return -g1 + 0.5 * g2


class Two(nn.Module):
    def __init__(self, cls):
        super().__init__()
        self.w, self.cls = nn.Parameter(torch.tensor([1.0, 2.0])), cls

    def forward(self):
        outputs = self.cls.apply(self.w * 1.0, self.w * 3.0) if self.cls is Pair else self.cls.apply(self.w * 1.0)  # @apply
        return {"loss": outputs[0].sum() + outputs[1].sum()}


def pair():
    return {"module": Two(Pair), "inputs": ()}


def halves():
    return {"module": Two(Halves), "inputs": ()}
"""


HOOKS = """
def tenth(g):  # @tenth
    return g * 0.1


class Hooked(nn.Module):
    def __init__(self, where):
        super().__init__()
        self.emb, self.lin, self.where = nn.Embedding(5, 3), nn.Linear(3, 1), where
        if where == "parameter":
            mask = torch.zeros(5, 1)
            self.emb.weight.register_hook(lambda g: g * mask)  # @parameter
        elif where == "module":
            self.lin.register_full_backward_hook(lambda m, gin, gout: (gin[0] * 0,))  # @module
        elif where == "pre":
            self.lin.register_full_backward_pre_hook(tenth)

    def forward(self, ids):
        h = self.emb(ids)
        if self.where == "forward":
            h.register_hook(tenth)  # @forward
        return {"loss": self.lin(h).sum()}


def step(where):
    return {"module": Hooked(where), "inputs": (torch.tensor([0, 3]),)}


def forward():
    return step("forward")


def parameter():
    return step("parameter")


def module():
    return step("module")


def pre():
    return step("pre")


def everywhere():
    torch.nn.modules.module.register_module_full_backward_hook(lambda m, gin, gout: None)  # @everywhere
    return step("none")


def frozen():
    s = step("parameter")
    s["module"].emb.weight.requires_grad_(False)
    return s
"""


@pytest.mark.parametrize("func, marker, col, what", [
    ("forward", "forward", 13, ""), ("parameter", "parameter", 1, " on parameter 'emb.weight'"),
    ("module", "module", 1, " on module 'lin'"), ("pre", "tenth", 1, " on module 'lin'"),
    ("everywhere", "everywhere", 1, " on every module")])
def test_import_gradient_hooks_are_refused_where_they_are_written(step_file, func, marker, col, what):
    """torch applies a hook's change to the gradient (a tenth, a mask, zeros); export does not record
    it, and the import would report the gradient without it."""
    path, line_of = step_file(HOOKS)
    try:
        with pytest.raises(ModelError) as caught:
            import_python(f"{path}:{func}")
    finally:
        torch.nn.modules.module._global_backward_hooks.clear()
    assert (caught.value.line, caught.value.col) == (line_of(marker), col)
    assert caught.value.message == (
        f"a gradient hook{what} cannot be imported: export does not record hooks, so gradflow would report the "
        "gradient as if it were not there; leave the hook out of the step checked (behind a flag, say)")


def test_import_hook_on_a_frozen_parameter_is_no_concern(step_file):
    path, _ = step_file(HOOKS)
    assert import_python(f"{path}:frozen").graph


@pytest.mark.parametrize("func, name", [("pair", "Pair"), ("halves", "Halves")])
def test_import_custom_function_returning_several_tensors_is_refused_at_its_call(step_file, func, name):
    """Export inlines the forward (two clones): imported as it traces, each output would pass the
    gradient through unchanged, where torch's backward doubles or mixes it."""
    path, line_of = step_file(PAIRS)
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:{func}")
    assert (caught.value.line, caught.value.message) == (
        line_of("apply"), f"custom autograd Function {name!r} cannot be analysed: it returns more than one tensor; "
                          "gradflow recognises gradient reversal (backward -g), scaling (backward c * g) and "
                          "straight-through estimators (backward g)")



SMALL_FUNCTIONS = """
class MyReLU(torch.autograd.Function):
    # the tutorial's custom relu: on a one-element tensor, one random probe can be all positive
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x > 0)


class StraightClamp(torch.autograd.Function):
    # clamps only values beyond 3, which a random probe rarely meets
    @staticmethod
    def forward(ctx, x):
        return x.clamp(-3, 3)

    @staticmethod
    def backward(ctx, grad):
        return grad


class Net(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.w, self.fn = nn.Parameter(torch.tensor([-0.5])), fn

    def forward(self, x):
        return {"loss": (self.fn.apply(self.w * x) * 2).sum()}  # @apply


def relu():
    return {"module": Net(MyReLU), "inputs": (torch.tensor([1.0]),)}


def clamp():
    return {"module": Net(StraightClamp), "inputs": (torch.tensor([-10.0]),)}
"""


def test_import_custom_function_masking_the_gradient_is_refused_even_on_one_element(step_file):
    path, line_of = step_file(SMALL_FUNCTIONS)
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:relu")
    assert (caught.value.line, caught.value.col) == (line_of("apply"), 26)
    assert "custom autograd Function 'MyReLU' cannot be analysed" in caught.value.message


def test_import_custom_function_changing_only_large_values_is_straight_through(step_file, same_as_torch):
    import gradflow
    path, _ = step_file(SMALL_FUNCTIONS)
    report = gradflow.analyze(gradflow.load(f"{path}:clamp"))
    assert report.losses[0].value == pytest.approx(6.0)   # 5 clamped to 3 as torch: not 10
    same_as_torch(report, path, "clamp")

IN_PLACE_FUNCTIONS = """
class ClampInPlace(torch.autograd.Function):
    # a straight-through clamp that writes its input, as ctx.mark_dirty allows
    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x.clamp_(-0.1, 0.1)

    @staticmethod
    def backward(ctx, grad):
        return grad


class ScaleInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return -0.5 * grad


class DoubleInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x.mul_(2)

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


class Net(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.lin, self.head, self.fn = nn.Linear(4, 4), nn.Linear(4, 1), fn

    def forward(self, x):
        h = self.lin(x)
        y = self.fn.apply(h)  # @apply
        return {"loss": (self.head(y) ** 2).sum() + (self.head(h) ** 3).sum()}  # h: written, as y


def clamp():
    torch.manual_seed(0)
    return {"module": Net(ClampInPlace), "inputs": (torch.randn(3, 4),)}


def scale():
    torch.manual_seed(0)
    return {"module": Net(ScaleInPlace), "inputs": (torch.randn(3, 4),)}


def double():
    torch.manual_seed(0)
    return {"module": Net(DoubleInPlace), "inputs": (torch.randn(3, 4),)}
"""


@pytest.mark.parametrize("func, name", [("clamp", "ClampInPlace"), ("scale", "ScaleInPlace"),
                                        ("double", "DoubleInPlace")])
def test_import_custom_function_writing_its_input_in_place_is_refused_in_gradflow_terms(step_file, func, name):
    # torch reads the written h through the Function afterwards, where export's graph reads it as before
    path, line_of = step_file(IN_PLACE_FUNCTIONS)
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:{func}")
    assert (caught.value.line, caught.value.col) == (line_of("apply"), 13)
    assert caught.value.message.startswith(f"custom autograd Function {name!r} cannot be analysed: it writes its "
                                           "input in place and returns it (ctx.mark_dirty); write into x.clone()")


REFUSED = """
class Lstm(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(3, 4, batch_first=True, proj_size=2)   # LSTMs import; a projected one does not

    def forward(self, x):
        out, _ = self.rnn(x)  # @lstm
        return {"loss": out.sum()}


class Data(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        h = self.lin(x)
        return {"loss": (h.data * x).sum()}  # @data


def lstm():
    return {"module": Lstm(), "inputs": (torch.randn(2, 5, 3),)}


def data():
    return {"module": Data(), "inputs": (torch.randn(2, 3),)}


def not_a_dict():  # @not_a_dict
    return Data()
"""


@pytest.mark.parametrize("func, marker, col, message", [
    ("lstm", "lstm", 18, "unsupported op aten.lstm.input"),
    ("data", "data", 26, "'.data' cannot be imported"),
    ("not_a_dict", "not_a_dict", 1, "not_a_dict() must return a dict"),
])
def test_import_refusals_are_located_at_the_users_line(step_file, func, marker, col, message):
    path, line_of = step_file(REFUSED)
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:{func}")
    e = caught.value
    assert (e.line, e.col) == (line_of(marker), col)
    assert e.message.startswith(message)


def test_import_missing_function_lists_the_files_functions(step_file):
    path, _ = step_file(GAN)
    with pytest.raises(ModelError, match=r"has no function 'stpe' \(it defines step\)"):
        import_python(f"{path}:stpe")



def test_a_func_that_needs_arguments_or_is_no_function_says_so(step_file):
    path, line_of = step_file("""
        size = 3

        def step(n):  # @needs
            return {"module": nn.Linear(n, 1), "inputs": (torch.randn(2, n),)}

        def keyword(*, n):  # @keyword
            return step(n)
    """)
    for func, marker in (("step", "needs"), ("keyword", "keyword")):
        with pytest.raises(ModelError) as caught:
            import_python(f"{path}:{func}")
        assert (caught.value.line, caught.value.col) == (line_of(marker), 1)
        assert caught.value.message.startswith(f"{func}() must take no arguments: gradflow calls it as {func}()")
    with pytest.raises(ModelError, match=r"'size' is not a function but a value of type int \(it defines keyword, step\)"):
        import_python(f"{path}:size")


def test_import_syntax_error_in_the_file_is_located(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import torch\n\ndef step(:\n    pass\n")
    with pytest.raises(ModelError, match="syntax error") as caught:
        import_python(f"{path}:step")
    assert (caught.value.line, caught.value.col) == (3, 10)


def run_cli(*args):
    from click.testing import CliRunner

    from gradflow.cli.main import cli
    return CliRunner().invoke(cli, list(args))


def test_cli_import_writes_the_model_file_and_its_arrays(step_file, tmp_path):
    import numpy as np
    path, line_of = step_file(GAN)
    out = tmp_path / "models" / "gan.yaml"
    out.parent.mkdir()
    result = run_cli("import", "torch", f"{path}:step", "-o", str(out))
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.startswith("gradflow: 1\n") and f"step.py:{line_of('detach')}:20" in text
    with np.load(tmp_path / "models" / "gan.npz") as arrays:
        assert sorted(arrays.files) == sorted(["G.0.weight", "G.0.bias", "G.2.weight", "G.2.bias", "D.weight",
                                               "D.bias", "z", "labels"])
        assert arrays["labels"].dtype == np.int64


def test_cli_import_without_output_prints_the_model_file(step_file):
    path, _ = step_file(GAN)
    result = run_cli("import", "torch", f"{path}:step")
    assert result.exit_code == 0
    assert result.stdout.startswith("gradflow: 1\nname: \"step\"\n")


def test_cli_import_never_overwrites_the_python_file(step_file):
    path, _ = step_file(GAN)
    before = open(path).read()
    result = run_cli("import", "torch", f"{path}:step", "-o", path)
    assert result.exit_code == 2
    assert "is the Python file being imported" in result.stderr
    assert open(path).read() == before


def test_cli_import_sends_what_the_users_code_prints_to_stderr(step_file):
    path, _ = step_file(GAN.replace("def step():  # @def\n", "def step():  # @def\n    print('building the GAN')\n"))
    result = run_cli("import", "torch", f"{path}:step")
    assert result.stdout.startswith("gradflow: 1\n")
    assert "building the GAN" in result.stderr


@pytest.mark.parametrize("typo, says", [("dloss", "(did you mean 'd_loss'?)"), ("gen", "(it returns d_loss, ce)")])
def test_import_wrt_naming_a_loss_the_module_does_not_return_points_at_the_def_line(step_file, typo, says):
    path, line_of = step_file(GAN.replace('"wrt": {"d_loss"', f'"wrt": {{"{typo}"'))
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:step")
    assert caught.value.message == f"wrt names {typo!r}, which module(*inputs) does not return {says}"
    assert caught.value.line == line_of("def")


@pytest.mark.parametrize("key, says", [("wtr", "(did you mean 'wrt'?)"),
                                       ("losses", "(the keys are module, inputs, wrt, expect, description)")])
def test_a_step_returning_an_unknown_key_is_told_the_key_it_meant(step_file, key, says):
    path, line_of = step_file(GAN.replace('"description": "a GAN step"', f'"{key}": {{}}'))
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:step")
    assert caught.value.message == f"step() returned an unknown key {key!r} {says}"


def test_import_puts_the_files_folder_first_on_sys_path_for_siblings(step_file, tmp_path):
    import sys
    (tmp_path / "nets_for_step.py").write_text("import torch.nn as nn\n\ndef encoder():\n    return nn.Linear(3, 2)\n")
    path, _ = step_file("""
    from nets_for_step import encoder


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = encoder()

        def forward(self, x):
            return {"loss": self.enc(x).sum()}


    def step():
        import nets_for_step  # a lazy import inside FUNC works too
        return {"module": Net(), "inputs": (torch.randn(2, 3),)}
    """)
    before = list(sys.path)
    assert [p.name for p in import_python(f"{path}:step").params] == ["enc.weight", "enc.bias"]
    assert sys.path == before


@pytest.mark.parametrize("source, func, marker, message", [
    (REFUSED, "lstm", "lstm", "unsupported op aten.lstm.input"),
    (FUNCTIONS, "odd", "odd", "custom autograd Function 'Odd' cannot be analysed"),
])
def test_cli_refusal_is_one_located_line_and_exit_2(step_file, source, func, marker, message):
    path, line_of = step_file(source)
    for command in ("check", "analyze"):
        result = run_cli(command, f"{path}:{func}")
        assert result.exit_code == 2
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"{path}:{line_of(marker)}:") and f"error: {message}" in line


def test_import_in_place_ops_get_valid_entry_names(step_file):
    from gradflow.model.reader import is_name
    path, _ = step_file("""
    class InPlace(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            h = self.lin(x)
            h.mul_(2).add_(1).mul_(3).relu_()
            return {"loss": h.sum()}


    def step():
        return {"module": InPlace(), "inputs": (torch.randn(2, 3),)}
    """)
    names = [t for line in import_python(f"{path}:step").graph for t in line.targets]
    assert len(names) == 6 and all(is_name(n) and "__" not in n for n in names)


EXITS = """
import argparse
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
args = parser.parse_args()      # a script's flags at import: it sees its own argv, not gradflow's


class Quits(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(2, 1)

    def forward(self, x):
        sys.exit(4)  # @forward


def step_exits():
    sys.exit(3)  # @step


def forward_exits():
    return {"module": Quits(), "inputs": (torch.randn(3, 2),)}


def generator_exit():
    raise GeneratorExit  # @generator


def wrong_shape():  # @wrong
    return {"module": nn.Linear(2, 2), "inputs": (torch.randn(3, 5),)}


class Fine(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(2, 1)

    def forward(self, x):
        return {"loss": self.l(x).sum() * args.lr}


def fine():
    return {"module": Fine(), "inputs": (torch.randn(3, 2),)}
"""


@pytest.mark.parametrize("func, marker, col, message", [
    ("step_exits", "step", 5, "step_exits() called sys.exit(3)"),
    ("forward_exits", "forward", 9, "the step's forward called sys.exit(4)"),
    ("generator_exit", "generator", 5, "generator_exit() raised GeneratorExit"),
    ("wrong_shape", "wrong", 1, "torch.export could not capture the step: RuntimeError: a and b must have same "
                                "reduction dim, but got [3, 5] X [2, 2]."),
])
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_users_code_that_exits_or_fails_is_one_located_line_and_the_other_files_are_checked(
        step_file, func, marker, col, message, jobs):
    path, line_of = step_file(EXITS)
    other = str(ROOT / "tests/models/bugs/dqn_target_leak.yaml")
    result = run_cli("check", "-j", jobs, f"{path}:{func}", other)
    assert result.exit_code == 2      # an invalid model, beside a failing one
    assert result.stderr == f"{path}:{line_of(marker)}:{col}: error: {message}\n"   # no torch log, no traceback
    assert "2 models checked: 1 failed, 1 invalid" in result.stdout


def test_a_script_reading_its_flags_at_import_sees_no_arguments_of_gradflows(step_file):
    path, _ = step_file(EXITS)
    result = run_cli("check", f"{path}:fine")
    assert result.exit_code == 0, result.output


def test_forward_sees_the_argv_func_saw_not_gradflows(step_file):
    path, _ = step_file("""
    import sys

    SEEN = []


    class Argv(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(2, 1)

        def forward(self, x):
            SEEN.append(list(sys.argv))
            return {"loss": self.l(x).sum() * len(sys.argv)}


    def step():
        SEEN.append(list(sys.argv))
        return {"module": Argv(), "inputs": (torch.randn(3, 2),)}
    """)
    import sys
    before = list(sys.argv)
    result = run_cli("analyze", f"{path}:step", "--format", "json")
    assert result.exit_code == 0, result.output
    module = next(m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == path)
    assert module.SEEN[0] == [path] and all(seen == [path] for seen in module.SEEN), module.SEEN
    assert sys.argv == before


VECTOR_LOSS = """
class Vector(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(2, 1)

    def forward(self, x):
        return {"loss": self.l(x)}  # @loss


def step():  # @def
    return {"module": Vector(), "inputs": (torch.randn(3, 2),)}
"""


def test_an_error_in_the_model_made_from_a_step_is_at_the_python_line_it_came_from(step_file):
    # Not at a line of the model file gradflow wrote from the step, which the user never saw,
    # nor at 'step.py:step:10:16', which no editor or CI annotation can open.
    path, line_of = step_file(VECTOR_LOSS)
    result = run_cli("check", f"{path}:step")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"{path}:{line_of('loss')}:25: error: loss 'loss' has shape [3, 1], but a "
                                    "loss must be a scalar: reduce it, e.g. return loss.mean() from forward\n")
    annotation = run_cli("check", f"{path}:step", "--format", "github").stdout
    assert annotation.startswith(f"::error file={path},line={line_of('loss')},col=25,")
    dim = run_cli("analyze", f"{path}:step", "--dim", "batch=4")
    assert dim.stderr == (f"{path}:{line_of('def')}:1: error: --dim batch=4: the model has no dim 'batch' "
                          "(it declares no dims)\n")


TWO_HEADS = """
class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 1)
        self.b = nn.Linear(3, 1)
        self.b.requires_grad_(False)

    def forward(self, x):
        return {"loss": (self.a(x) + self.b(x)).mean(), "leak": (self.a(x) * self.b(x)).mean()}


def step():
    return {"module": Heads(), "inputs": (torch.randn(4, 3),), "wrt": {"loss": ["*"], "leak": ["b.*"]}}
"""


def test_a_steps_findings_say_how_to_mend_them_in_python_not_in_a_model_file(step_file):
    # A step has no check: block and no frozen: key: its user unfreezes with requires_grad_
    # and silences a rule with --ignore.
    path, _ = step_file(TWO_HEADS)
    result = run_cli("check", f"{path}:step")
    assert "wrt '*' includes b.weight and b.bias, which are frozen (requires_grad is False when backward runs, " \
           "so no optimizer updates them): leave them out of wrt, or call requires_grad_(True) on them before " \
           "backward [GF101]" in result.stdout
    assert "this is harmless (add them to the wrt, or pass --ignore GF104) [GF104]" in result.stdout
    assert "check:" not in result.stdout and "frozen: true" not in result.stdout


def test_a_steps_json_lines_are_python_lines_not_lines_of_the_model_file_it_never_saw(step_file):
    import json
    path, line_of = step_file(GAN)
    doc = json.loads(run_cli("analyze", f"{path}:step", "--format", "json").stdout)
    assert {p["line"] for p in doc["params"]} == {line_of("def")}    # made where FUNC builds the module
    returned = next(i for i, line in enumerate(open(path).read().splitlines(), 1) if 'return {"d_loss"' in line)
    assert [(l["name"], l["line"]) for l in doc["losses"]] == [("d_loss", returned), ("ce", returned)]


def test_a_steps_table_says_its_values_are_the_steps_own_not_a_seeds(step_file):
    path, _ = step_file(TWO_HEADS)
    assert run_cli("analyze", f"{path}:step").stdout.splitlines()[1].startswith("numeric, the step's tensors; ")


def test_a_step_in_a_folder_named_with_a_quote_is_located_there_too(step_file, tmp_path):
    # The model file quotes source paths with JSON's escapes: the place is read back unescaped.
    (tmp_path / 'say "hi"').mkdir()
    path, line_of = step_file(VECTOR_LOSS, name='say "hi"/step.py')
    result = run_cli("check", f"{path}:step")
    assert result.stderr.startswith(f"{path}:{line_of('loss')}:25: error: loss 'loss' has shape [3, 1]")


def test_weights_and_memory_errors_of_a_step_are_at_its_python_lines(step_file, tmp_path):
    import numpy as np
    path, line_of = step_file(VECTOR_LOSS.replace('{"loss": self.l(x)}', '{"loss": self.l(x).sum()}'))
    weights = tmp_path / "w.npz"
    np.savez(weights, **{"l.weight": np.zeros((2, 2))})
    wrong = run_cli("analyze", f"{path}:step", "--weights", str(weights))
    assert wrong.stderr == (f"{path}:{line_of('def')}:1: error: weights 'l.weight' in {weights} has shape [2, 2], "
                            "but the model declares [1, 2]\n")
    big = run_cli("analyze", f"{path}:step", "--max-memory", "10")     # the largest tensor is the input x
    assert big.stderr.startswith(f"{path}:{line_of('def')}:1: error: a numeric run needs about ")
    assert "(its largest tensor is x [3, 2], made on this line)" in big.stderr
    assert "use --structural, or a smaller model or batch in the step (or raise --max-memory)" in big.stderr


def test_a_trace_that_fails_prints_no_torch_graph_only_the_users_prints_and_one_located_line(step_file):
    # export prints the partial graph of a trace stopped by a data-dependent size to stderr, twice
    path, line_of = step_file("""
    import sys


    class Step(nn.Module):
        def forward(self, x, idx):
            print("forward runs", file=sys.stderr)
            return {"loss": (x * F.one_hot(idx)).sum()}  # @one_hot


    def step():
        print("step runs")
        return {"module": Step(), "inputs": (torch.randn(3, 3), torch.tensor([0, 1, 2]))}
    """)
    result = run_cli("check", f"{path}:step")
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert lines[:2] == ["step runs", "forward runs"] and len(lines) == 3, result.stderr
    assert lines[2].startswith(f"{path}:{line_of('one_hot')}:") and "error: torch.export could not" in lines[2]


CHECKPOINTS = """
import torch.utils.checkpoint as cp


class Step(nn.Module):
    def __init__(self, first):
        super().__init__()
        self.first = first
        self.a, self.b, self.c = nn.Linear(3, 4), nn.Linear(4, 4), nn.Linear(4, 1)

    def forward(self, x):
        h = cp.checkpoint(self.a, x) if self.first else torch.tanh(self.a(x))  # @first
        h = cp.checkpoint(self.b, h, use_reentrant=True)
        h = cp.checkpoint_sequential(nn.Sequential(self.b, nn.Tanh()), 2, h, use_reentrant=True)
        return {"loss": self.c(torch.tanh(h)).pow(2).sum()}


def inside():
    torch.manual_seed(0)
    return {"module": Step(False), "inputs": (torch.randn(2, 3),)}


def first():
    torch.manual_seed(0)
    return {"module": Step(True), "inputs": (torch.randn(2, 3),)}
"""


@pytest.mark.parametrize("func, cut", [("inside", set()), ("first", {"a.weight", "a.bias", "b.weight", "b.bias"})])
def test_reentrant_checkpoint_cuts_only_what_torch_does(step_file, func, cut):
    # export traced everything after a reentrant checkpoint without gradient; torch cuts only the
    # parameters inside one whose tensor arguments need no gradient ("Gradients will be None")
    import numpy as np

    import gradflow
    from gradflow.importers.torch.target import load_step
    path, line_of = step_file(CHECKPOINTS)
    report = gradflow.analyze(gradflow.load(f"{path}:{func}"))
    assert {p.name for p in report.params if report.status(p.name, "loss") == "blocked"} == cut
    step = load_step(path, func)   # torch's own answer: reentrant checkpoints refuse autograd.grad
    module = step.module.double()
    with warnings.catch_warnings():   # torch's advice on use_reentrant, and its "Gradients will be None"
        warnings.simplefilter("ignore", UserWarning)
        module(*[t.double() for t in step.inputs])["loss"].backward()
    for name, p in module.named_parameters():
        if name in cut:
            assert p.grad is None, name
        else:
            np.testing.assert_allclose(report.grad(name, "loss"), p.grad.numpy(), rtol=1e-6, err_msg=name)
    if cut:   # at the first call, which nothing before it sends gradient into
        assert f"blocked by no_grad in linear_no_grad ({path}:{line_of('first')}:13)" in report.findings[0].message


AUTOCAST = """
class Step(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(3, 4), nn.Linear(4, 4), nn.Linear(4, 1)

    @torch.autocast("cpu", dtype=torch.bfloat16)
    def head(self, h):
        return self.c(h)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = torch.tanh(self.a(x))
        with torch.autocast("cuda", enabled=False):   # as a script written for a GPU has it
            h = torch.tanh(self.b(h))
        return {"loss": self.head(h).pow(2).sum()}


def step():
    torch.manual_seed(0)
    return {"module": Step(), "inputs": (torch.randn(2, 3),)}
"""


def test_autocast_blocks_import_as_their_code(step_file, same_as_torch):
    # export wrapped each block in a call gradflow refused (at the def line), even a disabled one;
    # in float64 autocast changes nothing, in torch as in gradflow
    import gradflow
    path, _ = step_file(AUTOCAST)
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    assert not report.findings
    same_as_torch(report, path, "step")


HARD_EXITS = """
import os

if os.environ.get("GRADFLOW_TEST_EXIT_AT_IMPORT"):
    os._exit(3)  # @import


class Quits(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(2, 1)

    def forward(self, x):
        os._exit(3)  # @forward


def step():
    return {"module": Quits(), "inputs": (torch.randn(3, 2),)}
"""


@pytest.mark.parametrize("where, says", [("import", "importing {path} called os._exit(3) (is the training run "
                                                   "behind `if __name__ == '__main__':`?)"),
                                         ("forward", "the step's forward called os._exit(3)")])
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_os_exit_in_the_users_code_is_one_located_line_and_the_other_files_are_checked(
        step_file, monkeypatch, where, says, jobs):
    # it ended gradflow at once with the code it chose (0: a CI job passed), the other files unchecked,
    # or, with -j, was 'internal error: WorkerDied'; a regression here ends pytest with exit code 3
    path, line_of = step_file(HARD_EXITS)
    if where == "import":
        monkeypatch.setenv("GRADFLOW_TEST_EXIT_AT_IMPORT", "1")
    result = run_cli("check", "-j", jobs, f"{path}:step", str(ROOT / "tests/models/bugs/dqn_target_leak.yaml"))
    assert result.exit_code == 2
    assert result.stderr == f"{path}:{line_of(where)}:{5 if where == 'import' else 9}: error: " \
                            f"{says.format(path=path)}\n"
    assert "2 models checked: 1 failed, 1 invalid" in result.stdout


DATA_DEPENDENT = """
class Branch(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)

    def forward(self, x):
        h = self.l(x)
        if h.sum().item() > 0:  # @if
            h = h * 2
        return {"loss": h.sum()}


class OneHot(nn.Module):
    def forward(self, x, idx):
        return {"loss": (x * F.one_hot(idx)).sum()}  # @one_hot


def branch():
    return {"module": Branch(), "inputs": (torch.randn(2, 3),)}


def one_hot():
    return {"module": OneHot(), "inputs": (torch.randn(3, 3), torch.tensor([0, 1, 2]))}
"""


@pytest.mark.parametrize("func, marker", [("branch", "if"), ("one_hot", "one_hot")])
def test_a_line_that_depends_on_a_tensors_values_says_so_not_torchs_guard_jargon(step_file, func, marker):
    # it said "GuardOnDataDependentSymNode: Could not guard on data-dependent expression zuf0 > 0.0 (unhinted: ...)"
    path, line_of = step_file(DATA_DEPENDENT)
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:{func}")
    assert (caught.value.path, caught.value.line) == (path, line_of(marker))
    assert caught.value.message == (
        "torch.export could not capture the step: what this line does depends on a tensor's values (a Python `if` "
        "on one, `.item()`, or a size such as F.one_hot's without num_classes); compute it without them "
        "(torch.where, an explicit size)")


def test_an_async_func_is_one_located_line_without_pythons_never_awaited_warning(tmp_path):
    import subprocess
    import sys
    path = tmp_path / "step.py"
    path.write_text("import torch\n\n\nasync def step():\n    return {}\n")
    result = subprocess.run([sys.executable, "-m", "gradflow.cli.main", "check", f"{path}:step"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr == f"{path}:4:1: error: step() must return a dict with 'module' and 'inputs', not coroutine\n"


def test_tensors_made_in_forward_are_float64_in_the_torch_comparison_too(step_file, same_as_torch):
    # the importer makes forward's new tensors float64; a float32 one would fail torch's matmul here
    import gradflow
    path, _ = step_file("""
    class Made(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)

        def forward(self, x):
            return {"loss": (self.lin(x) @ torch.linspace(-1.0, 1.0, 6).reshape(3, 2)).pow(2).sum()}


    def step():
        torch.manual_seed(0)
        return {"module": Made(), "inputs": (torch.randn(2, 4),)}
    """)
    same_as_torch(gradflow.analyze(gradflow.load(f"{path}:step")), path, "step")


def test_a_random_fill_of_a_new_tensor_in_forward_is_drawn_once_at_import_as_randn_like_is(step_file):
    # torch.empty_like(std).normal_() is the older spelling of randn_like(std), as in a VAE's
    # reparameterisation: the draw becomes a constant input, which the loss then reads
    import gradflow
    from gradflow.importers.torch.target import load_step
    path, _ = step_file("""
    class Reparam(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc, self.logvar = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            mu, std = self.enc(x), torch.exp(0.5 * self.logvar(x))
            eps = torch.empty_like(std).normal_()
            u = torch.empty(3, 4).uniform_(-1.0, 1.0)
            return {"loss": (mu + eps * std + u).pow(2).sum()}


    def step():
        torch.manual_seed(0)
        return {"module": Reparam(), "inputs": (torch.randn(3, 4),)}
    """)
    imported = import_python(f"{path}:step")
    eps, u = imported.arrays["normal_0"], imported.arrays["uniform"]   # "normal" is an op's name
    assert eps.shape == u.shape == (3, 4) and eps.std() > 0.3 and -1 <= u.min() < u.max() <= 1
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    assert {report.status(p.name, "loss") for p in report.params} == {"flows"}
    step = load_step(path, "step")   # the same weights: the loss from the drawn constants, in torch
    m, x = step.module.double(), step.inputs[0].double()
    mu, std = m.enc(x), torch.exp(0.5 * m.logvar(x))
    expected = (mu + torch.from_numpy(eps) * std + torch.from_numpy(u)).pow(2).sum().item()
    assert report.losses[0].value == pytest.approx(expected, rel=1e-12)


SAC_ALPHA = """
class Temperature(nn.Module):
    def __init__(self, buffer):
        super().__init__()
        self.actor = nn.Linear(4, 2)
        if buffer:
            self.register_buffer("log_alpha", torch.full((1,), 0.3, requires_grad=True))
        else:
            self.log_alpha = torch.full((1,), 0.3, requires_grad=True)   # its own optimizer trains it

    def forward(self, s):
        logp = F.log_softmax(self.actor(s), -1)
        entropy = -(logp.exp() * logp).sum(-1)
        return {"actor_loss": (-self.log_alpha.exp().detach() * entropy).mean(),
                "alpha_loss": (self.log_alpha * (entropy + 2.0).detach()).mean()}


def attribute():
    torch.manual_seed(0)
    return {"module": Temperature(False), "inputs": (torch.randn(8, 4),)}


def buffer():
    torch.manual_seed(0)
    return {"module": Temperature(True), "inputs": (torch.randn(8, 4),)}
"""


@pytest.mark.parametrize("func", ["attribute", "buffer"])
def test_a_tensor_that_requires_grad_without_being_a_parameter_is_a_parameter(step_file, func):
    # SAC's temperature: torch gives log_alpha a gradient, so gradflow must not take it for a constant
    import numpy as np

    import gradflow
    from gradflow.importers.torch.target import load_step
    path, _ = step_file(SAC_ALPHA)
    report = gradflow.analyze(gradflow.load(f"{path}:{func}"))
    assert [p.name for p in report.params] == ["actor.weight", "actor.bias", "log_alpha"]
    assert not report.by_name["log_alpha"].frozen
    assert report.status("log_alpha", "actor_loss") == report.status("actor.weight", "alpha_loss") == "blocked"
    step = load_step(path, func)
    module = step.module
    log_alpha = module.log_alpha.detach().double().requires_grad_(True)
    weight, bias = (p.detach().double().requires_grad_(True) for p in module.actor.parameters())
    logp = torch.log_softmax(step.inputs[0].double() @ weight.T + bias, -1)
    entropy = -(logp.exp() * logp).sum(-1)
    alpha_loss = (log_alpha * (entropy + 2.0).detach()).mean()
    actor_loss = (-log_alpha.exp().detach() * entropy).mean()
    np.testing.assert_allclose(report.grad("log_alpha", "alpha_loss"), torch.autograd.grad(alpha_loss, log_alpha)[0])
    np.testing.assert_allclose(report.grad("actor.weight", "actor_loss"), torch.autograd.grad(actor_loss, weight)[0])
    assert not [f for f in report.findings if f.severity == "error" or f.rule == "GF106"]


TOGGLES = """
def set_requires_grad(net, flag):
    for p in net.parameters():
        p.requires_grad = flag  # @flag


class Pix2Pix(nn.Module):
    def __init__(self):
        super().__init__()
        self.G = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
        self.D = nn.Sequential(nn.Linear(8, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
        self.head = nn.Linear(4, 1)

    def forward(self, a, b):
        fake = self.G(a)
        set_requires_grad(self.D, False)      # the generator's loss: D trains nothing from it
        g_loss = F.softplus(-self.D(torch.cat((a, fake), 1))).mean() + (fake - b).abs().mean()
        set_requires_grad(self.D, True)
        d_loss = F.softplus(self.D(torch.cat((a, fake.detach()), 1))).mean() \\
            + F.softplus(-self.D(torch.cat((a, b), 1))).mean()
        self.G.requires_grad_(False)  # @freeze
        a.requires_grad_(True)        # not a parameter: nothing to note
        probe = self.head(self.G(a)).mean()
        self.G.requires_grad_(True)
        return {"g_loss": g_loss, "d_loss": d_loss, "probe": probe}


def step():
    torch.manual_seed(0)
    return {"module": Pix2Pix(), "inputs": (torch.randn(6, 4), torch.randn(6, 4)),
            "wrt": {"g_loss": ["G.*"], "d_loss": ["D.*"], "probe": ["head.*"]}}
"""


def test_requires_grad_switched_off_in_forward_cuts_the_uses_made_while_it_is_off(step_file, same_as_torch):
    # pix2pix's set_requires_grad(netD, False) around the generator's loss: export does not record it
    import gradflow
    path, line_of = step_file(TOGGLES)
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    same_as_torch(report, path, "step")
    for name in ("D.0.weight", "D.2.bias"):
        assert report.status(name, "g_loss") == "blocked" and report.status(name, "d_loss") == "flows"
        [cut] = report.pair(name, "g_loss").cut_by
        assert (cut.op, cut.line) == ("no_grad", line_of("flag"))
    [cut] = report.pair("G.0.weight", "probe").cut_by
    assert (report.status("G.0.weight", "g_loss"), cut.line) == ("flows", line_of("freeze"))
    assert not report.by_name["G.0.weight"].frozen and not report.findings


FREEZING_ORDER = """
class Order(nn.Module):
    def __init__(self):
        super().__init__()
        self.D, self.E = nn.Linear(4, 1), nn.Linear(4, 1)
        self.E.requires_grad_(False)      # left frozen by the previous iteration

    def forward(self, x):
        d_loss = self.D(x).pow(2).mean()
        self.D.requires_grad_(False)      # never set back: backward finds it frozen
        early = self.E(x).mean()  # @early
        self.E.requires_grad_(True)
        late = self.E(x).pow(2).mean()
        return {"d_loss": d_loss, "early": early, "late": late}


def step():
    torch.manual_seed(0)
    return {"module": Order(), "inputs": (torch.randn(6, 4),)}
"""


def test_requires_grad_is_what_backward_finds_and_uses_before_a_parameter_is_set_trainable_are_cut(step_file):
    # torch accumulates no gradient into a parameter whose requires_grad is False when backward runs,
    # and records no use made while it was False, though forward started with it so
    import numpy as np

    import gradflow
    from gradflow.importers.torch.target import load_step
    path, line_of = step_file(FREEZING_ORDER)
    report = gradflow.analyze(gradflow.load(f"{path}:step"))
    assert report.by_name["D.weight"].frozen and not report.by_name["E.weight"].frozen
    assert report.status("E.weight", "early") == "blocked" and report.status("E.weight", "late") == "flows"
    [cut] = report.pair("E.weight", "early").cut_by
    assert (cut.op, cut.line) == ("no_grad", line_of("early"))
    step = load_step(path, "step")
    losses = step.module.double()(step.inputs[0].double())
    assert not losses["early"].requires_grad
    losses["d_loss"].backward()
    assert step.module.D.weight.grad is None
    (grad,) = torch.autograd.grad(losses["late"], step.module.E.weight)
    np.testing.assert_allclose(report.grad("E.weight", "late"), grad.numpy(), rtol=1e-9)


def test_a_constant_mask_of_minus_infinity_imports_and_is_kept_out_of_the_model_file(step_file, same_as_torch,
                                                                                     tmp_path):
    # nn.Transformer.generate_square_subsequent_mask and a buffer of -inf: constants that a model
    # file cannot spell (its numbers are finite), so they travel in the weights archive
    import numpy as np

    import gradflow
    from gradflow.importers import import_python
    path, _ = step_file("""
    class Causal(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
            self.register_buffer("mask", torch.full((5, 5), float("-inf")).triu(1))

        def forward(self, x):
            made = nn.Transformer.generate_square_subsequent_mask(5)
            a, _ = self.attn(x, x, x, attn_mask=made, need_weights=False)
            b, _ = self.attn(x, x, x, attn_mask=self.mask, need_weights=False)
            return {"loss": a.pow(2).mean() + b.abs().mean()}


    def step():
        torch.manual_seed(0)
        return {"module": Causal(), "inputs": (torch.randn(2, 5, 8),)}
    """)
    same_as_torch(gradflow.analyze(gradflow.load(f"{path}:step")), path, "step")
    imported = import_python(f"{path}:step")
    masks = [t for t in imported.inputs if t.value is not None and np.isinf(t.value).any()]
    assert masks and "inf" not in imported.to_yaml(str(tmp_path))
