"""How a run ends early: Ctrl-C (one line, exit 130), a closed stdout (quietly, exit 141) and
output that cannot be written (one line, exit 2); and how every run ends, at once."""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time

import click

try:    # the C module behind `signal`, which makes three enum classes at import (half a millisecond)
    import _signal as signal
except ImportError:
    import signal

from gradflow.cli.exits import Exit


class Interrupted(BaseException):
    """Ctrl-C, raised by gradflow's own SIGINT handler: click would turn a KeyboardInterrupt
    into 'Aborted!' and exit 1."""


GRACE = 0.5   # seconds the main thread has to end cleanly before the watchdog ends the process
announced = False


def catch_interrupts() -> None:
    """Ctrl-C raises Interrupted from now on (the CLI's entry point calls this), and a
    watchdog thread makes sure the process ends within a second even when the main
    thread is inside a long numpy call: Python runs signal handlers only between
    bytecodes, but writes the signal to the wakeup pipe at once."""
    signal.signal(signal.SIGINT, interrupted)
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    threading.Thread(target=watchdog, args=(read,), daemon=True).start()


def watchdog(read: int) -> None:
    # Imports nothing: the main thread may hold the import lock when this runs.
    while os.read(read, 1) != bytes([signal.SIGINT]):
        pass
    time.sleep(GRACE)   # normally the process has ended by now
    if not announced:
        click.echo("gradflow: interrupted", err=True)
    forks = sys.modules.get("gradflow.cli.forks")   # loaded only when -j started workers
    for pid in list(forks.LIVE) if forks else ():
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:   # reaped since
            pass
    processes = sys.modules.get("multiprocessing")   # the standard pool's, where there are no forks
    for child in processes.active_children() if processes else ():
        child.terminate()
    os._exit(Exit.INTERRUPTED)


def interrupted(signum=None, frame=None):
    # Further presses are ignored: the first one's clean-up (stopping workers) takes well
    # under a second, and a second Interrupted raised inside it could leave workers running.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Interrupted


def stop_interrupted() -> None:
    global announced
    announced = True
    click.echo("gradflow: interrupted", err=True)
    sys.exit(Exit.INTERRUPTED)


def stop_closed_stdout() -> None:
    """The reader of stdout has gone (``| head``): end quietly."""
    silence_stdout()
    sys.exit(Exit.PIPE)


def stop_unwritable(error: OSError) -> None:
    """Output could not be written (a full disk, a device error): one line and exit 2. A
    file gradflow opens is named in its error; stdout's errors name no file."""
    from gradflow.cli.escape import shown
    where = "cannot write the output" if error.filename is None else shown(error.filename)
    try:
        click.echo(f"gradflow: error: {where}: {error.strerror or error}", err=True)
    except OSError:   # stderr too
        pass
    silence_stdout()
    sys.exit(Exit.INVALID)


def silence_stdout() -> None:
    """Keep Python's final flush of stdout from failing again on what failed already."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):   # not a real file (a test runner's buffer)
        pass


def end_at_once(code) -> None:
    """Exit with ``code`` (a SystemExit's) now, without the interpreter's teardown, which frees
    every module and object one by one: milliseconds, for a process about to end anyway.
    Only when the teardown has nothing else to do: every stream flushed, no atexit function
    (``-j``'s pool registers some, as do coverage tools), no thread but daemons. Otherwise
    this returns and the usual exit follows, which also reports a flush that fails.
    No finalizer runs and no file left open is flushed here: code that must do something
    at exit registers an atexit function, and the usual exit then runs it."""
    code = 0 if code is None else code
    if type(code) is bool or not isinstance(code, int) or not 0 <= code <= 255:
        return   # Python's own exit prints such a code, or makes it 1
    if getattr(atexit, "_ncallbacks", lambda: 1)():
        return
    if any(not thread.daemon for thread in threading.enumerate() if thread is not threading.main_thread()):
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return
    os._exit(code)
