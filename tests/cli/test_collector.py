"""The garbage collector is off only while a command loads its libraries: every command
that works on models turns it on again, and nothing but the entry point turns it off."""

from __future__ import annotations

import gc

import pytest
from click.testing import CliRunner

from gradflow.cli import collector
from gradflow.cli.main import cli
from tests.conftest import MODELS

TAPE = str(MODELS / "stop_gradient_tape.yaml")


@pytest.fixture
def paused():
    collector.pause()
    try:
        yield
    finally:
        collector._paused = False
        gc.enable()
        gc.unfreeze()


@pytest.mark.parametrize("args", [["check", TAPE], ["check", "-j", "2", TAPE, str(MODELS / "dqn.yaml")],
                                  ["analyze", TAPE], ["why", TAPE, "x"], ["graph", TAPE],
                                  ["gradcheck", TAPE]])
def test_collector_runs_again_in_every_command_on_models(paused, args):
    assert not gc.isenabled()
    result = CliRunner().invoke(cli, args)
    assert result.exit_code in (0, 1), result.output
    assert gc.isenabled()


def test_collector_is_left_alone_without_the_entry_point():
    gc.disable()
    try:
        collector.resume()
        assert not gc.isenabled()
    finally:
        gc.enable()
