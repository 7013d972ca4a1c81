"""`analyze --save-grads`: a target that cannot be written fails before the analysis, an
input of the run is never overwritten, the path is used as given and written atomically."""

from __future__ import annotations

import errno
import os
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from gradflow.cli.main import cli
from tests.conftest import MODELS

TAPE = str(MODELS / "stop_gradient_tape.yaml")


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture
def no_analysis(monkeypatch):
    """Fails the test if the analysis starts: refusals must come first."""
    def analyze_file(*args, **kwargs):
        raise AssertionError("the analysis ran before the target was checked")
    monkeypatch.setattr("gradflow.cli.run.analyze_file", analyze_file)


def test_save_grads_path_is_used_as_given(tmp_path):
    out = tmp_path / "grads.out"
    assert run("analyze", TAPE, "--save-grads", out).exit_code == 0
    assert sorted(os.listdir(tmp_path)) == ["grads.out"]   # no .npz appended, no temporary left
    with np.load(out) as saved:
        assert float(saved["z/x"]) == pytest.approx(7.0)


def test_save_grads_missing_directory_fails_before_the_analysis(tmp_path, no_analysis):
    result = run("analyze", TAPE, "--save-grads", tmp_path / "nowhere" / "g.npz")
    assert result.exit_code == 2
    assert "Invalid value for '--save-grads'" in result.stderr and "no such directory" in result.stderr


def test_save_grads_unwritable_directory_fails_before_the_analysis(no_analysis):
    result = run("analyze", TAPE, "--save-grads", "/proc/g.npz")   # refuses new files, even for root
    assert result.exit_code == 2 and "cannot write in '/proc'" in result.stderr


@pytest.mark.parametrize("target", ["/dev/null", "directory"])
def test_save_grads_target_must_be_a_regular_file(tmp_path, no_analysis, target):
    result = run("analyze", TAPE, "--save-grads", tmp_path if target == "directory" else target)
    assert result.exit_code == 2 and "Invalid value for '--save-grads'" in result.stderr


def test_save_grads_never_overwrites_the_model(tmp_path, no_analysis):
    model = tmp_path / "m.yaml"
    shutil.copy(TAPE, model)
    (tmp_path / "link.npz").symlink_to(model)
    for target in (model, tmp_path / "link.npz"):
        result = run("analyze", model, "--save-grads", target)
        assert result.exit_code == 2 and "is the model this run reads" in result.stderr
    assert model.read_text() == open(TAPE).read()


def test_save_grads_never_overwrites_the_weights(tmp_path, no_analysis):
    weights = tmp_path / "w.npz"
    np.savez(weights, x=np.array(5.0))
    before = weights.read_bytes()
    result = run("analyze", TAPE, "--weights", weights, "--save-grads", weights)
    assert result.exit_code == 2 and "is the --weights archive this run reads" in result.stderr
    assert weights.read_bytes() == before


def test_save_grads_with_structural_is_a_usage_error(tmp_path, no_analysis):
    result = run("analyze", TAPE, "--structural", "--save-grads", tmp_path / "g.npz")
    assert result.exit_code == 2 and "no gradients to save" in result.stderr


def test_save_grads_full_disk_is_an_error_and_keeps_the_old_file(tmp_path, monkeypatch):
    out = tmp_path / "g.npz"
    out.write_bytes(b"previous gradients")

    def savez(file, **arrays):
        file.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(np, "savez", savez)
    result = run("analyze", TAPE, "--save-grads", out)
    assert result.exit_code == 2
    assert result.stderr == f"{out}:1:1: error: cannot write gradients: No space left on device\n"
    assert out.read_bytes() == b"previous gradients" and os.listdir(tmp_path) == ["g.npz"]


def test_save_grads_keeps_the_permissions_a_new_file_gets(tmp_path):
    out = tmp_path / "g.npz"
    mask = os.umask(0o022)
    try:
        assert run("analyze", TAPE, "--save-grads", out).exit_code == 0
    finally:
        os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o644
