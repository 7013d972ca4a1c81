"""`analyze --save-grads F.npz`: where the gradients go, checked before the analysis runs.

The path is used exactly as given (numpy would append ``.npz`` to a name without
it), never names a file the run reads (the model, the ``--weights`` archive) or
anything but a regular file, and is written atomically: a temporary file in the
same directory, renamed over the target only when it is complete.
"""

from __future__ import annotations

import os
import stat
import tempfile

import click

from gradflow.errors import ModelError


def usage(message: str) -> click.BadParameter:
    return click.BadParameter(message, param_hint="'--save-grads'")


def check_target(path: str, inputs: dict) -> None:
    """Refuse a target that cannot or must not be written, before any work is done.
    ``inputs``: what the run reads, by what it is ("the model": PATH, ...)."""
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise usage(f"{path!r}: no such directory {folder!r}")
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None
    except OSError as e:
        raise usage(f"{path!r}: {e.strerror or e}") from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise usage(f"{path!r} exists and is not a regular file")
    for what, name in inputs.items():
        if info is not None and name and os.path.exists(name) and os.path.samefile(path, name):
            raise usage(f"{path!r} is {what} this run reads; it is never overwritten")
    try:   # the only sure test that the directory takes new files (root ignores mode bits)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".gradflow-", suffix=".tmp")
    except OSError as e:
        raise usage(f"cannot write in {folder!r}: {e.strerror or e}") from None
    os.close(fd)
    os.unlink(probe)


def write_atomically(path: str, arrays: dict) -> None:
    """np.savez into a temporary file beside ``path``, then rename it onto ``path``."""
    import numpy as np
    folder = os.path.dirname(path) or "."
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".gradflow-", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode_for(path))
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise ModelError(f"cannot write gradients: {e.strerror or e}", path, 1, 1) from None


def mode_for(path: str) -> int:
    """The permissions a plain open() would give (mkstemp's are owner-only), or the old file's."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask
