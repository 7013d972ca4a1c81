"""How a run ends: at once, past the interpreter's teardown, with the output and exit code
that Python's usual exit gives; the usual exit wherever something is left for it to do."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import MODELS, ROOT

# Each way of ending says so last on stderr: os._exit, wrapped, for the one at once, an
# atexit function (which makes the run leave its end to Python) for the usual one.
SCRIPT = """
import atexit, os, sys
from gradflow.cli.main import main

exit_now, ours = os._exit, os.getpid()   # -j's workers end with os._exit too
os._exit = lambda code: (os.getpid() == ours and os.write(2, b"at once\\n"), exit_now(code))
if sys.argv[1] == "usual":
    atexit.register(lambda: os.write(2, b"usual\\n"))
if sys.argv[1] == "pool":      # -j on the standard process pool, as where fork is not used
    import gradflow.cli.workers
    gradflow.cli.workers.FORKS = False
sys.argv = ["gradflow", *sys.argv[2:]]
main()
"""

COMMANDS = [["check", MODELS / "dead_relu.yaml"],                               # warnings, exit 0
            ["check", "--format", "json", MODELS / "stop_gradient_tape.yaml"],
            ["check", ROOT / "tests/models/bugs/dqn_target_leak.yaml"],          # a check fails: 1
            ["check", ROOT / "tests/models/invalid"],                            # invalid models: 2
            ["analyze", "--format", "markdown", MODELS / "gan.yaml"],
            ["--version"], ["check", "--jobs", "0", MODELS],                     # a usage error: 2
            ["check", "-j", "2", MODELS / "dead_relu.yaml", MODELS / "gan.yaml"]]  # forked workers


def ended(how: str, args: list) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT, how, *map(str, args)], capture_output=True, cwd=ROOT)


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(str(x).rsplit("/", 1)[-1] for x in a))
def test_a_run_ends_at_once_as_the_usual_exit_would_end_it(args):
    at_once, usual = ended("at once", args), ended("usual", args)
    assert at_once.stderr.endswith(b"at once\n") and usual.stderr.endswith(b"usual\n")
    assert at_once.stdout == usual.stdout and at_once.stderr[:-8] == usual.stderr[:-6]
    assert at_once.returncode == usual.returncode


def test_a_run_on_the_standard_pool_ends_through_the_usual_exit():
    """The pool registers an exit handler of its own: it is left to run."""
    done = ended("pool", ["check", "-j", "2", MODELS / "dead_relu.yaml", MODELS / "gan.yaml"])
    assert done.returncode == 0 and b"at once" not in done.stderr
    assert done.stdout == ended("usual", ["check", MODELS / "dead_relu.yaml", MODELS / "gan.yaml"]).stdout
