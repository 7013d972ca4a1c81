"""Every command-line value is checked: a bad one is a usage error (exit 2), never a traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gradflow.cli.main import cli
from tests.conftest import MODELS

TAPE = str(MODELS / "stop_gradient_tape.yaml")
GAN = str(MODELS / "gan.yaml")


@pytest.mark.parametrize("args", [
    ["analyze", GAN, "--dim", "batch=²"],
    ["analyze", GAN, "--dim", "batch=①"],
    ["analyze", GAN, "--dim", "batch=" + "9" * 5000],
    ["analyze", GAN, "--dim", "=3"],
    ["analyze", GAN, "--dim", "batch=2.5"],
    ["analyze", TAPE, "--seed", "-1"],
    ["analyze", TAPE, "--seed", str(2 ** 64)],
    ["gradcheck", TAPE, "--eps", "0"],
    ["gradcheck", TAPE, "--eps", "nan"],
    ["gradcheck", TAPE, "--eps", "inf"],
    ["gradcheck", TAPE, "--eps", "-1"],
    ["gradcheck", TAPE, "--rtol", "-1"],
    ["gradcheck", TAPE, "--rtol", "nan"],
    ["gradcheck", TAPE, "--rtol", "inf"],
    ["gradcheck", TAPE, "--atol", "-1"],
    ["gradcheck", TAPE, "--atol", "nan"],
    ["gradcheck", TAPE, "--samples", "0"],
    ["analyze", TAPE, "--max-memory", "nan"],
    ["analyze", TAPE, "--max-memory", "inf"],
    ["analyze", TAPE, "--max-memory", "-1"],
    ["analyze", TAPE, "--max-memory", "garbage"],
    ["check", TAPE, "-j", "0"],
    ["check", TAPE, "--select", "GF999"],
    ["check", TAPE, "--ignore", "GF1O2"],
    ["check", TAPE, "--select", "GF107", "--ignore", "gf106,GF107"],
    ["why", TAPE, "x", "--limit", "0"],
])
def test_bad_command_line_value_is_a_usage_error(args):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "Usage:" in result.stderr and "Error:" in result.stderr
    assert "Traceback" not in result.output and "internal error" not in result.output


def test_unknown_rule_id_on_the_command_line_suggests_the_close_one():
    result = CliRunner().invoke(cli, ["check", TAPE, "--ignore", "GF1O2"])
    assert result.stderr.endswith("Error: Invalid value for '--ignore': unknown rule id 'GF1O2' "
                                  "(did you mean 'GF102'?)\n")


def test_a_rule_both_selected_and_ignored_is_a_usage_error_not_a_failed_model():
    result = CliRunner().invoke(cli, ["check", TAPE, "--select", "GF107", "--ignore", "gf107"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.endswith("Error: --select and --ignore: GF107 is both selected and ignored\n")


@pytest.mark.parametrize("size, ok", [("1", False), ("2GiB", True), ("512MB", True), ("1e9", True)])
def test_max_memory_accepts_sizes_and_keeps_the_guard(size, ok):
    result = CliRunner().invoke(cli, ["analyze", GAN, "--max-memory", size])
    assert (result.exit_code == 0) == ok, result.output
    if not ok:
        assert "a numeric run needs about" in result.stderr
