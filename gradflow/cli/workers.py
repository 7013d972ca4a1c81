"""`check -j N`: one call per file in worker processes, results in the order given.

On Linux the workers are forks of this process (``forks``). Elsewhere they come from the
standard process pool: fork without exec is unsafe with macOS's system libraries, and
Windows has none.

Workers ignore Ctrl-C, so one interrupt reaches only the main process, which stops
them at once (they are terminated, not waited for) and exits 130. A worker that dies
(killed for memory, say) takes its unfinished files with it; those are checked again
one at a time, each in a process of its own, so only the file that kills its process
is lost (reported through ``lost(item, error)``).
"""

from __future__ import annotations

import signal
import sys

FORKS = sys.platform.startswith("linux")
DIED = "the process checking this file died, perhaps killed for memory"


class WorkerDied(Exception):
    """The process checking a file ended without a result (killed for memory, say)."""


def ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def in_parallel(func, items: list, jobs: int, args: tuple, lost, progress) -> list:
    """[func(item, *args) for item in items] on ``jobs`` processes, a few files per task:
    one round trip per file cost more than a small model's whole check."""
    chunks = chunked(items, jobs)
    if not FORKS:
        return in_pool(func, items, chunks, min(jobs, len(chunks)), args, lost, progress)
    from gradflow.cli.forks import Forks
    try:
        forks = Forks(func, chunks, args, min(jobs, len(chunks)))
    except OSError:   # the system gives no more processes: this one checks the files
        return [func(item, *args) for item in progress(items, "checking")]
    with forks:
        for k in progress(range(len(chunks)), "checking"):
            forks.wait_for(k)
    results = []
    for k, chunk in enumerate(chunks):
        if k in forks.results:
            results += outcome(chunk, forks.results[k], lost)
        else:   # its worker died: again one by one, so only the file that kills one is lost
            results += [forked_alone(func, item, args, lost) for item in chunk]
    return results


def forked_alone(func, item, args: tuple, lost):
    from gradflow.cli.forks import Forks
    try:
        forks = Forks(func, [[item]], args, 1)
    except OSError as e:   # no process to risk it in: not in this one, which it may kill
        return lost(item, e)
    with forks:
        forks.wait_for(0)
    return outcome([item], forks.results.get(0, WorkerDied(DIED)), lost)[0]


def outcome(chunk: list, done, lost) -> list:
    """A chunk's results as they came back, or, for each of its items, the error that kept
    them from coming back."""
    return [lost(item, done) for item in chunk] if isinstance(done, Exception) else done


def in_pool(func, items: list, chunks: list, jobs: int, args: tuple, lost, progress) -> list:
    """``in_parallel`` on the standard process pool."""
    from concurrent.futures.process import BrokenProcessPool
    pool = pool_of(jobs)   # the pool starts all its workers at once, busy or not
    try:
        futures = [(chunk, submitted(pool, func, chunk, args)) for chunk in chunks]
        results, broken = [], []
        for chunk, future in progress(futures, "checking"):
            try:
                results += future.result()
            except BrokenProcessPool:   # some worker died: every file it left unfinished is lost
                broken += range(len(results), len(results) + len(chunk))
                results += [None] * len(chunk)
            except Exception as e:   # the results could not come back
                results += outcome(chunk, e, lost)
    except BaseException:
        stop(pool)
        raise
    pool.shutdown()
    for k in broken:   # again, one by one, so only the file that kills a worker is lost
        results[k] = pooled_alone(func, items[k], args, lost)
    return results


def submitted(pool, func, chunk: list, args: tuple):
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool
    try:
        return pool.submit(run_chunk, func, chunk, args)
    except BrokenProcessPool as e:   # a worker died while chunks were still being handed out
        future = Future()
        future.set_exception(e)
        return future


def chunked(items: list, jobs: int) -> list:
    """Consecutive chunks of at most 8 items, smaller and smaller towards the end (a quarter
    of what is left per worker), so the workers finish together rather than one waiting
    for the other's last large chunk."""
    chunks, start = [], 0
    while start < len(items):
        size = max(1, min(8, (len(items) - start) // (jobs * 4)))
        chunks.append(items[start:start + size])
        start += size
    return chunks


def run_chunk(func, chunk: list, args: tuple) -> list:
    return [func(item, *args) for item in chunk]


def pool_of(jobs: int):
    from concurrent.futures import ProcessPoolExecutor
    return ProcessPoolExecutor(max_workers=jobs, initializer=ignore_interrupts)


def pooled_alone(func, item, args: tuple, lost):
    from concurrent.futures.process import BrokenProcessPool
    pool = pool_of(1)
    try:
        return pool.submit(func, item, *args).result()
    except BrokenProcessPool:
        return lost(item, WorkerDied(DIED))
    except Exception as e:
        return lost(item, e)
    except BaseException:
        stop(pool)
        raise
    finally:
        pool.shutdown(wait=False)


def stop(pool) -> None:
    """Cancel what has not started and end the workers now, not after their current file."""
    # Python 3.14 has pool.terminate_workers(); before it, the pool's own table of processes.
    workers = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        process.terminate()
    for process in workers:
        process.join(timeout=1)
