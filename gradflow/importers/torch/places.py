"""Which Python frame made a node: the innermost one in the user's own files.

torch's export metadata keeps a trimmed stack without columns, so the importer
looks at the live stack itself while the graph is traced. A frame is the user's
when its file is not torch's, gradflow's, the standard library's or another
installed package's.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from contextlib import contextmanager
from functools import lru_cache
from itertools import islice

import torch

from gradflow.errors import ModelError
from gradflow.importers.document import Source

# gradflow's own package: three folders up from gradflow/importers/torch/places.py
_GRADFLOW = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_NOT_USER = tuple({_TORCH, _GRADFLOW + os.sep,
                   *(os.path.abspath(p) + os.sep for p in
                     (sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")) if p)})


@lru_cache(maxsize=4096)
def is_user_file(filename: str) -> bool:
    if filename.startswith("<"):
        return False
    return not os.path.abspath(filename).startswith(_NOT_USER)


def is_user_frame(frame) -> bool:
    return is_user_file(frame.f_code.co_filename)


def is_torch_frame(frame) -> bool:
    return os.path.abspath(frame.f_code.co_filename).startswith(_TORCH)


_GRAD_MODE = (os.path.join(_TORCH, "autograd", "grad_mode.py"), os.path.join(_TORCH, "utils", "_contextlib.py"))


def set_in_user_code(depth: int) -> bool:
    """Is the gradient mode being set by the user's own code: a ``with torch.no_grad()`` in the
    user's files, or a function of theirs under ``@torch.no_grad()``, not a library's (the
    ``with`` inside a torch distribution's ``sample()``)? (``depth`` as user_source's)"""
    frame = sys._getframe(depth)
    while frame is not None and not frame.f_code.co_filename.startswith(_GRAD_MODE):
        frame = frame.f_back
    while frame is not None and frame.f_code.co_filename.startswith(_GRAD_MODE):
        decorated = frame.f_locals.get("func") if frame.f_code.co_name == "decorate_context" else None
        if callable(decorated) and hasattr(decorated, "__code__"):
            return is_user_file(decorated.__code__.co_filename)
        frame = frame.f_back
    return frame is None or is_user_frame(frame)


_MODULE = os.path.join(_TORCH, "nn", "modules", "module.py")


def set_by_user(depth: int) -> bool:
    """Is a tensor's flag being set by the user's code, directly or through nn.Module's own
    method (``module.requires_grad_(False)``), not by torch's machinery? (``depth`` as user_source's)"""
    frame = sys._getframe(depth)
    while frame is not None and frame.f_code.co_filename == _MODULE:
        frame = frame.f_back
    return frame is not None and is_user_frame(frame)


def position(code, lasti: int, line: int) -> Source:
    """The place of instruction ``lasti`` of ``code``; 1-based column on Python 3.11+."""
    col = 1
    positions = getattr(code, "co_positions", None)
    if positions is not None and lasti >= 0:
        found = next(islice(positions(), lasti // 2, None), None)
        if found and found[0] is not None:
            line, col = found[0], (found[2] or 0) + 1
    return Source(os.path.abspath(code.co_filename), line, col)


def frame_source(frame) -> Source:
    return position(frame.f_code, frame.f_lasti, frame.f_lineno)


def user_source(depth: int = 1, stop=None) -> Source | None:
    """The innermost user frame on the current stack below frame ``stop``, or None."""
    frame = sys._getframe(depth)
    while frame is not None and frame is not stop:
        if is_user_file(frame.f_code.co_filename):
            return frame_source(frame)
        frame = frame.f_back
    return None


def user_source_in_traceback(tb) -> Source | None:
    """The innermost user frame of a traceback, or None."""
    found = None
    while tb is not None:
        if is_user_file(tb.tb_frame.f_code.co_filename):
            found = position(tb.tb_frame.f_code, tb.tb_lasti, tb.tb_lineno)
        tb = tb.tb_next
    return found


def display(path: str) -> str:
    """``path`` relative to the working directory when inside it, else as it is."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith(os.pardir) else rel


@contextmanager
def users_failure(message, fallback: Source):
    """Run the user's code: what it raises is its failure, one ModelError whose text is
    ``message(error)``, at the innermost user frame of the traceback (else ``fallback``).
    Any exception, a BaseException of its own too (pytest.importorskip's Skipped), or a
    SystemExit; a ModelError of gradflow's passes, as do KeyboardInterrupt and gradflow's
    own stops (Ctrl-C): ``stops`` says which."""
    try:
        yield
    except ModelError:
        raise
    except BaseException as e:
        if stops(e):
            raise
        at = user_source_in_traceback(e.__traceback__) or fallback
        raise ModelError(message(e), display(at.path), at.line, at.col) from None


def stops(error: BaseException) -> bool:
    """Ctrl-C, as Python's KeyboardInterrupt or as gradflow's own: never the user's failure."""
    if isinstance(error, KeyboardInterrupt):
        return True
    return not isinstance(error, (Exception, SystemExit)) and type(error).__module__.split(".")[0] == "gradflow"


def raised(error: BaseException) -> str:
    """'raised ValueError: boom', or 'raised GeneratorExit' when it says nothing more."""
    return f"raised {type(error).__name__}" + (f": {error}" if str(error) else "")


def exit_call(error: SystemExit) -> str:
    """How the user's code ended the process it thought it had: 'called sys.exit(2)'."""
    call = "os._exit" if isinstance(error, HardExit) else "sys.exit"
    return f"called {call}({'' if error.code is None else repr(error.code)})"


class HardExit(SystemExit):
    """os._exit called by the user's code, raised instead: it would end gradflow at once, with
    the exit code it chose (0: a CI job passes) and the other files unchecked."""


@contextmanager
def no_hard_exit():
    """os._exit raises HardExit in this process while the user's code runs; a process that
    code forks (a DataLoader worker) still ends with it."""
    real, pid = os._exit, os.getpid()

    def hard_exit(code):
        if os.getpid() != pid:
            real(code)
        raise HardExit(code)
    os._exit = hard_exit
    try:
        yield
    finally:
        os._exit = real
