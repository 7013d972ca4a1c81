"""`check -j N` on Linux: workers that are forks of this process (see ``workers``).

This process has loaded everything a check needs and holds the chunks of files, so a
fork starts warm and is sent no files: every worker reads chunk numbers from one shared
pipe, which the parent fills and closes, and writes each chunk's results back, pickled,
on a pipe of its own. The standard process pool would cost more than a small folder's
check: its import (multiprocessing, logging, sockets) takes about 15 ms, and its exit
handler keeps the process from ending at once.

A chunk whose results never came back (its worker died) is left out of ``results``;
``workers`` checks its files again, one process each.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import sys
import warnings

LIVE: set = set()   # pids of the workers running now, for the Ctrl-C watchdog (endings.py)
NUMBER = 4          # bytes of a chunk number on the task pipe (PIPE_BUF is a multiple of it)
LENGTH = 8          # bytes of a message's length before its pickle on a result pipe


class Forks:
    """``count`` workers calling ``func(item, *args)`` for every item of the chunks they take.
    ``results[k]`` is chunk k's list of results, or the exception that kept them from coming back.
    Used as a context manager: leaving it early (Ctrl-C) ends the workers at once."""

    def __init__(self, func, chunks: list, args: tuple, count: int):
        self.results, self.ends = {}, {}
        sys.stdout.flush()   # what is buffered now would be written again by a worker's stream
        sys.stderr.flush()
        read, write = os.pipe()
        self.tasks = write
        try:
            for _ in range(count):
                pid, fd = fork(lambda out: serve(func, chunks, args, read, out), [write, *self.ends])
                self.ends[fd] = [pid, bytearray()]
                LIVE.add(pid)
        except BaseException:    # no more processes (or Ctrl-C): end the ones started
            self.__exit__(*sys.exc_info())
            raise
        finally:
            os.close(read)
        self.waiting = memoryview(b"".join(k.to_bytes(NUMBER, "little") for k in range(len(chunks))))
        os.set_blocking(write, False)   # a long list is written as workers take from it
        self.poll = select.poll()
        for fd in self.ends:
            self.poll.register(fd, select.POLLIN)
        self.poll.register(write, select.POLLOUT)

    def __enter__(self):
        return self

    def __exit__(self, kind, error, trace):
        for pid, _ in self.ends.values():
            if error is not None:
                os.kill(pid, signal.SIGTERM)
        self.close()

    def wait_for(self, k: int) -> None:
        """Until chunk ``k``'s results are back, or no worker is left to bring them."""
        while k not in self.results and self.ends:
            for fd, _ in self.poll.poll():
                self.write_tasks() if fd == self.tasks else self.read(fd)

    def write_tasks(self) -> None:
        # At most PIPE_BUF bytes a write, which the system writes whole or not at all: a
        # number written in part could be read in part, and every number after it misread.
        try:
            sent = os.write(self.tasks, self.waiting[:select.PIPE_BUF])
        except BlockingIOError:   # no room for that much yet
            sent = 0
        except BrokenPipeError:   # no worker is left to read them
            sent = len(self.waiting)
        self.waiting = self.waiting[sent:]
        if not self.waiting:      # all sent: the workers end once they find the pipe empty
            self.poll.unregister(self.tasks)
            os.close(self.tasks)
            self.tasks = None

    def read(self, fd: int) -> None:
        data = os.read(fd, 1 << 20)
        if not data:              # the worker ended
            self.poll.unregister(fd)
            self.end(fd)
            return
        buffer = self.ends[fd][1]
        buffer += data
        while len(buffer) >= LENGTH:
            size = LENGTH + int.from_bytes(buffer[:LENGTH], "little")
            if len(buffer) < size:   # the rest of this message is still on its way
                break
            k, results = pickle.loads(buffer[LENGTH:size])
            self.results[k] = results
            del buffer[:size]

    def end(self, fd: int) -> None:
        os.close(fd)
        pid, _ = self.ends.pop(fd)
        os.waitpid(pid, 0)
        LIVE.discard(pid)

    def close(self) -> None:
        if self.tasks is not None:
            os.close(self.tasks)
            self.tasks = None
        for fd in list(self.ends):
            self.end(fd)


def fork(work, closed: list) -> tuple[int, int]:
    """A worker running ``work(fd)`` (fd: its result pipe) and then ending, never returning
    here; ``closed``: this process's file descriptors it must not hold open. (pid, read end)."""
    read, write = os.pipe()
    try:
        with warnings.catch_warnings():
            # Python 3.12 and later warn of forking with threads. The one other thread here is
            # the Ctrl-C watchdog, blocked in a read and holding no lock: the fork is safe.
            warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
            pid = os.fork()
    except BaseException:
        os.close(read)
        os.close(write)
        raise
    if pid == 0:
        code = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle
            for fd in [read, *closed]:   # else the pipes would not end when their owners close them
                os.close(fd)
            work(write)
            code = 0
        finally:
            try:
                sys.stderr.flush()   # what --debug printed
            finally:                 # whatever happens, never back into the caller's code
                os._exit(code)
    os.close(write)
    return pid, read


def serve(func, chunks: list, args: tuple, tasks: int, out: int) -> None:
    """A worker's loop: take a chunk number, send back the chunk's results, until none is left."""
    while len(number := os.read(tasks, NUMBER)) == NUMBER:
        k = int.from_bytes(number, "little")
        results = [func(item, *args) for item in chunks[k]]
        try:
            message = pickle.dumps((k, results), pickle.HIGHEST_PROTOCOL)
        except Exception as e:   # the results cannot be sent: the chunk's files get why
            message = unsendable(k, e)
        send(out, len(message).to_bytes(LENGTH, "little") + message)


def unsendable(k: int, error: Exception) -> bytes:
    try:
        return pickle.dumps((k, error))
    except Exception:
        return pickle.dumps((k, RuntimeError(f"{type(error).__name__}: {error}")))


def send(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
