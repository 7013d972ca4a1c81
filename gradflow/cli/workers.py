"""`check -j N`: one call per file in worker processes, results in the order given.

Workers ignore Ctrl-C, so one interrupt reaches only the main process, which stops
them at once (they are terminated, not waited for) and exits 130. A worker that dies
(killed for memory, say) costs only the files it had: each is reported through
``lost(item, error)`` and the rest of the run goes on.
"""

from __future__ import annotations

import signal


def ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def in_parallel(func, items: list, jobs: int, args: tuple, lost, progress) -> list:
    """[func(item, *args) for item in items] on ``jobs`` processes."""
    from concurrent.futures import ProcessPoolExecutor
    pool = ProcessPoolExecutor(max_workers=jobs, initializer=ignore_interrupts)
    try:
        futures = [(item, pool.submit(func, item, *args)) for item in items]
        results = []
        for item, future in progress(futures, "checking"):
            try:
                results.append(future.result())
            except Exception as e:   # the worker died, or the result could not come back
                results.append(lost(item, e))
    except BaseException:
        stop(pool)
        raise
    pool.shutdown()
    return results


def stop(pool) -> None:
    """Cancel what has not started and end the workers now, not after their current file."""
    # Python 3.14 has pool.terminate_workers(); before it, the pool's own table of processes.
    workers = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        process.terminate()
    for process in workers:
        process.join(timeout=1)
