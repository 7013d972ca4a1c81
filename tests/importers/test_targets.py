"""Python targets without torch installed: one located line saying how to install it."""

from __future__ import annotations

import importlib.util
import re

import pytest

from gradflow.errors import ModelError
from gradflow.importers import TARGET, import_python, is_python_target

STEP = "def step():\n    return {}\n"


@pytest.fixture
def no_torch(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))


def test_import_target_names_a_python_file_and_function():
    assert is_python_target("train.py:step") and is_python_target("dir/train.py")
    assert not is_python_target("models/gan.yaml")
    with pytest.raises(ModelError, match="FILE.py:FUNC"):
        import_python("train.py")


@pytest.mark.parametrize("text, meant, whole", [
    ("train.py:step", True, True), ("a.py:b.py:f", True, True), ("ünï.py:_", True, True),
    ("train.py", True, False), ("x.py:", True, False), ("x.py:1f", True, False), ("a.py:f:g", True, False),
    ("dir/t.py:f\n", True, False), ("x.py:a.b", True, False), (".py:f", False, False), ("m.yaml", False, False),
    ("py:f", False, False), ("x.pyc:f", False, False), ("x.py:f/m.yaml", False, False), ("x.py:f.yaml", False, False)])
def test_python_target_is_what_the_pattern_says(text, meant, whole):
    # meant: taken for a Python target (a malformed one gets the form's error, not "cannot read");
    # whole: one naming a file and a function
    assert is_python_target(text) == meant and (re.match(TARGET, text) is not None) == whole


@pytest.mark.parametrize("target", ["step.py:", "step.py:1f", "step.py:f:g", "step.py:a.b"])
def test_a_python_target_without_a_good_function_name_says_the_form_at_the_file(tmp_path, target):
    from click.testing import CliRunner

    from gradflow.cli.main import cli
    (tmp_path / "step.py").write_text(STEP)
    result = CliRunner().invoke(cli, ["check", str(tmp_path / target)])
    assert result.exit_code == 2
    assert result.stderr == (f"{tmp_path / 'step.py'}:1:1: error: a Python model is named FILE.py:FUNC, the "
                             "function that returns the training step (e.g. train.py:gan_step)\n")


def test_import_without_torch_says_how_to_install_it(no_torch, tmp_path):
    (tmp_path / "step.py").write_text(STEP)
    with pytest.raises(ModelError, match=r"pip install 'gradflow\[torch\]'"):
        import_python(f"{tmp_path / 'step.py'}:step")


def test_cli_python_target_without_torch_exits_2_with_the_install_hint(no_torch, tmp_path):
    from click.testing import CliRunner

    from gradflow.cli.main import cli
    (tmp_path / "step.py").write_text(STEP)
    for args in (["check", f"{tmp_path / 'step.py'}:step"], ["import", "torch", f"{tmp_path / 'step.py'}:step"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2
        assert result.stderr.strip().endswith("error: importing a PyTorch model needs torch: "
                                              "pip install 'gradflow[torch]'")
