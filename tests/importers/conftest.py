"""Helpers for importer tests: write a training-step file and find lines in it by marker; compare
an imported step's values and gradients with torch's."""

from __future__ import annotations

import textwrap

import pytest


@pytest.fixture
def step_file(tmp_path):
    """write(body) -> (path, line_of): the file, and the 1-based line holding a '# @marker' comment."""
    def write(body: str, name: str = "step.py"):
        text = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n" + textwrap.dedent(body)
        path = tmp_path / name
        path.write_text(text)
        lines = text.splitlines()

        def line_of(marker: str) -> int:
            return next(i for i, line in enumerate(lines, 1) if line.rstrip().endswith(f"# @{marker}"))
        return str(path), line_of
    return write


@pytest.fixture
def same_as_torch():
    """check(report, path, func): every (loss, param) of the report against torch.autograd.grad
    on a fresh float64 copy of the step (frozen parameters asked too): None is blocked or
    unreachable, zeros are zero, anything else flows with the same values (rtol 1e-6). Tensors
    made in forward are float64, as the importer makes them."""
    import numpy as np
    torch = pytest.importorskip("torch")
    from gradflow.importers.torch import float64
    from gradflow.importers.torch.target import load_step

    def check(report, path: str, func: str, only=None) -> None:
        """``only``: the names of the losses to compare (all by default)."""
        step = load_step(path, func)
        module = step.module.double()
        params = dict(module.named_parameters())
        for p in params.values():
            p.requires_grad_(True)
        with float64():
            losses = module(*[t.double() if t.dtype.is_floating_point else t for t in step.inputs])
        assert {p.name for p in report.params} == set(params)
        for loss, value in losses.items():
            if only is not None and loss not in only:
                continue
            grads = torch.autograd.grad(value, list(params.values()), allow_unused=True, retain_graph=True) \
                if value.requires_grad else [None] * len(params)
            for name, g in zip(params, grads):
                status = report.status(name, loss)
                if g is None:
                    assert status in ("blocked", "unreachable"), (loss, name, status)
                elif not g.any():
                    assert status == "zero", (loss, name, status)
                else:
                    assert status == "flows", (loss, name, status)
                    np.testing.assert_allclose(report.grad(name, loss), g.numpy(), rtol=1e-6, atol=1e-12,
                                               err_msg=f"{loss} {name}")
    return check


def same_values_as_torch(report, path: str, func: str) -> None:
    """Each loss's value against the step run by torch in float64, tensors made in forward too, as
    the importer makes them (inf and nan where torch's are)."""
    import numpy as np
    import torch
    from gradflow.importers.torch import float64
    from gradflow.importers.torch.target import load_step
    step = load_step(path, func)
    module = step.module.double()
    with torch.no_grad(), float64():
        losses = module(*[t.double() if t.dtype.is_floating_point else t for t in step.inputs])
    values = {loss.name: loss.value for loss in report.losses}
    assert set(values) == set(losses)
    for name, value in losses.items():
        np.testing.assert_allclose(values[name], value.item(), rtol=1e-9, atol=1e-12, err_msg=name)


def check(path: str, func: str, same_as_torch):
    """The step's report, its values and gradients checked against torch's."""
    import gradflow
    report = gradflow.analyze(gradflow.load(f"{path}:{func}"))
    same_values_as_torch(report, path, func)
    same_as_torch(report, path, func)
    return report


def close_in_float32(path: str, func: str = "step") -> None:
    """The step checked in float32: the same exit code as in float64 (NaN gradients, as torch's,
    are GF105 errors), never 2, and every flowing gradient float32, close to float64's."""
    import numpy as np
    from click.testing import CliRunner

    import gradflow
    from gradflow.cli.main import cli
    code = CliRunner().invoke(cli, ["check", f"{path}:{func}"]).exit_code
    assert code != 2 and CliRunner().invoke(cli, ["check", f"{path}:{func}", "--dtype", "float32"]).exit_code == code
    ours = gradflow.analyze(gradflow.load(f"{path}:{func}", dtype="float32"))
    exact = gradflow.analyze(gradflow.load(f"{path}:{func}"))
    for param in exact.params:
        for loss, pair in param.grads.items():
            if pair.status != "flows":
                continue
            mine, theirs = ours.grad(param.name, loss), exact.grad(param.name, loss)
            assert mine.dtype == np.float32
            np.testing.assert_allclose(mine, theirs, rtol=2e-4, atol=1e-5, err_msg=f"{loss} {param.name}")


def one_error_at_call(step_file, body: str, says: str) -> None:
    """The step ``body`` checked is one error at its line marked ``@call`` (exit 2), which says
    ``says``: no Traceback, no internal error."""
    from click.testing import CliRunner

    from gradflow.cli.main import cli
    path, line_of = step_file(body)
    result = CliRunner().invoke(cli, ["check", f"{path}:step"])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"{path}:{line_of('call')}:")
    assert says in result.stderr and result.stderr.count("error:") == 1
    assert "Traceback" not in result.output and "internal error" not in result.output
