"""Opening the files a model run reads: only regular files, never more than a limit.

A FIFO would block a reader forever and a device (``/dev/zero``) never ends, so the
kind of file is checked before it is read; its size is checked before a byte is
read, and the read itself stops one byte past the limit in case the file grows.
"""

from __future__ import annotations

import os
import stat

from gradflow.errors import ModelError

KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
         (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
         (stat.S_ISSOCK, "a socket"))


def kind_of_file(mode: int) -> str:
    return next((name for test, name in KINDS if test(mode)), "not a regular file")


def open_regular(path: str, what: str, limit: int | None = None):
    """A binary file object for ``path`` when it is a regular file of at most ``limit``
    bytes; otherwise a ModelError at ``path:1:1`` saying why it cannot be read."""
    path = str(path)
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):   # refused before open(): opening a FIFO blocks
            raise ModelError(f"cannot read {what}: {kind_of_file(mode)}, not a regular file", path, 1, 1)
        # O_NONBLOCK: should the file have become a FIFO since stat(), open() still returns.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise ModelError(f"cannot read {what}: {e.strerror or e}", path, 1, 1) from None
    f = os.fdopen(fd, "rb")
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or (limit is not None and info.st_size > limit):
        f.close()
        why = (f"{kind_of_file(info.st_mode)}, not a regular file" if not stat.S_ISREG(info.st_mode)
               else f"larger than {human_bytes(limit)} ({human_bytes(info.st_size)})")
        raise ModelError(f"cannot read {what}: {why}", path, 1, 1)
    return f


def read_regular(path: str, what: str, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (ModelError otherwise)."""
    with open_regular(path, what, limit) as f:
        try:
            data = read_at_most(f, limit + 1)
        except OSError as e:
            raise ModelError(f"cannot read {what}: {e.strerror or e}", str(path), 1, 1) from None
    if len(data) > limit:   # it grew after fstat()
        raise ModelError(f"cannot read {what}: larger than {human_bytes(limit)}", str(path), 1, 1)
    return data


def read_at_most(f, count: int) -> bytes:
    """``f.read(count)``, without a buffer of ``count`` bytes made first (for 16 MiB, more
    time than reading a model takes): the size the file has now and one byte more, to see
    whether it grew, then the rest only if it did (or if its size says nothing, as in /proc)."""
    size = os.fstat(f.fileno()).st_size
    data = f.read(min(size + 1, count))
    if len(data) > size:
        data += f.read(count - len(data))
    return data


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB': sizes in messages, in binary units, three digits or whole (1000 B,
    never 1e+03 B)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}" if n < 1000 else f"{n:.0f} {unit}"
        n /= 1024
