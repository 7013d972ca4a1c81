"""The commands defined apart from the group (commands.py) are there when named or listed."""

from __future__ import annotations

import subprocess
import sys

import click
from click.testing import CliRunner

from gradflow.cli.main import cli
from tests.conftest import MODELS, ROOT

EVERY = ("analyze", "check", "gradcheck", "graph", "import", "ops", "schema", "why")   # as the spec lists them


def test_help_lists_every_command_and_each_runs_by_name():
    listed = CliRunner().invoke(cli, ["--help"]).output
    assert all(f"  {name} " in listed for name in EVERY)
    result = CliRunner().invoke(cli, ["graph", str(MODELS / "stop_gradient_tape.yaml")])
    assert result.exit_code == 0 and result.output
    assert sorted(cli.commands) == list(EVERY)


def test_help_in_a_fresh_process_lists_every_command():
    # Here no other test has added the commands to the group before --help lists them.
    done = subprocess.run([sys.executable, "-m", "gradflow.cli.main", "--help"], capture_output=True,
                          text=True, cwd=ROOT)
    listed = done.stdout.split("Commands:")[1]
    assert done.returncode == 0 and [line.split()[0] for line in listed.splitlines()[1:9]] == list(EVERY)


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


def every_command(command, path=("gradflow",)):
    yield path, command
    if isinstance(command, click.Group):
        for name in command.list_commands(None):
            yield from every_command(command.get_command(None, name), (*path, name))


def test_every_option_of_every_command_says_what_it_does():
    # Each line of --help says what its option is for: --dim and --seed of gradcheck and graph
    # were bare 'NAME=INT' and 'INTEGER RANGE'.
    bare = [(" ".join(path), p.opts[0]) for path, command in every_command(cli) for p in command.params
            if isinstance(p, click.Option) and not p.hidden and not p.help]
    assert bare == []
    help_text = CliRunner().invoke(cli, ["gradcheck", "--help"]).output
    assert "Override a dim of the model file." in help_text and "--seed N " in help_text
