"""The commands defined apart from the group (commands.py) are there when named or listed."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from gradflow.cli.main import ELSEWHERE, cli
from tests.conftest import MODELS, ROOT


def test_the_group_names_every_command_defined_elsewhere():
    from gradflow.cli.commands import COMMANDS
    assert sorted(command.name for command in COMMANDS) == sorted(ELSEWHERE)


def test_help_lists_every_command_and_each_runs_by_name():
    listed = CliRunner().invoke(cli, ["--help"]).output
    assert all(f"  {name} " in listed for name in ("check", *ELSEWHERE))
    result = CliRunner().invoke(cli, ["graph", str(MODELS / "stop_gradient_tape.yaml")])
    assert result.exit_code == 0 and result.output
    assert set(cli.commands) == {"check", *ELSEWHERE}


def test_check_alone_never_loads_the_other_commands():
    code = ("import atexit, sys; from gradflow.cli.main import main; sys.argv = ['gradflow', 'check', *sys.argv[1:]]\n"
            "atexit.register(lambda: print('gradflow.cli.commands' in sys.modules, file=sys.stderr))\nmain()")
    done = subprocess.run([sys.executable, "-c", code, str(MODELS / "stop_gradient_tape.yaml")],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and done.stderr.strip().splitlines()[-1] == "False"


def test_a_mistyped_command_is_matched_against_every_command():
    # In a process of its own: another test may have loaded the commands into this one's group.
    for typed, meant in (("analyse", "Did you mean 'analyze'?"), ("grph", "Did you mean 'graph'?"),
                         ("chek", "(Did you mean one of: 'check', 'gradcheck', 'schema'?)")):
        done = subprocess.run([sys.executable, "-m", "gradflow.cli.main", typed, "x.yaml"],
                              capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 2
        assert done.stderr.strip().splitlines()[-1] == f"Error: No such command '{typed}'. {meant}"
