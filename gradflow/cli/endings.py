"""How a run ends early: Ctrl-C (one line, exit 130) and a closed stdout (quietly, exit 141)."""

from __future__ import annotations

import os
import signal
import sys

import click

from gradflow.cli.main import Exit


class Interrupted(BaseException):
    """Ctrl-C, raised by gradflow's own SIGINT handler: click would turn a KeyboardInterrupt
    into 'Aborted!' and exit 1."""


def catch_interrupts() -> None:
    """Ctrl-C raises Interrupted from now on (the CLI's entry point calls this)."""
    signal.signal(signal.SIGINT, interrupted)


def interrupted(signum=None, frame=None):
    # Further presses are ignored: the first one's clean-up (stopping workers) takes well
    # under a second, and a second Interrupted raised inside it could leave workers running.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Interrupted


def stop_interrupted() -> None:
    click.echo("gradflow: interrupted", err=True)
    sys.exit(Exit.INTERRUPTED)


def stop_closed_stdout() -> None:
    """The reader of stdout has gone (``| head``): end quietly, and keep Python's final flush
    of stdout from complaining about the same closed pipe."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):   # not a real file (a test runner's buffer)
        pass
    sys.exit(Exit.PIPE)
