"""`check -j`'s workers: forks on Linux, the standard process pool elsewhere. Both give every
result in order, lose only a file whose process dies, and end their processes on Ctrl-C."""

from __future__ import annotations

import os
import pickle
import select
import signal
import time

import pytest

from gradflow.cli import forks, workers
from gradflow.cli.run import lost

WAYS = [pytest.param(True, id="forks"), pytest.param(False, id="pool")]


def nothing_shown(items, label):
    return items


@pytest.fixture(params=WAYS)
def way(request, monkeypatch):
    monkeypatch.setattr(workers, "FORKS", request.param)
    return request.param


def negated(item):
    return -item


def dies_at_three(item):
    if item == 3:
        os._exit(9)   # as a worker killed for memory ends
    return -item


def unsendable_at_three(item):
    return (lambda: item) if item == 3 else -item   # a lambda cannot be pickled


def test_workers_give_every_result_in_order(way):
    items = list(range(100))
    assert workers.in_parallel(negated, items, 3, (), lost, nothing_shown) == [-i for i in items]


def test_workers_start_no_more_processes_than_there_are_chunks(monkeypatch):
    started, real = [], forks.fork
    monkeypatch.setattr(forks, "fork", lambda *a: started.append(1) or real(*a))
    assert workers.in_parallel(abs, [-1, -2], 16, (), lost, nothing_shown) == [1, 2]
    assert len(started) == 2


def test_the_pool_starts_no_more_workers_than_there_are_chunks(monkeypatch):
    monkeypatch.setattr(workers, "FORKS", False)
    sizes, real = [], workers.pool_of
    monkeypatch.setattr(workers, "pool_of", lambda jobs: sizes.append(jobs) or real(jobs))
    assert workers.in_parallel(abs, [-1, -2], 16, (), lost, nothing_shown) == [1, 2]
    assert sizes == [2]


def test_a_worker_that_dies_costs_only_the_item_it_died_on(way):
    items = list(range(100))
    assert len(workers.chunked(items, 2)[0]) == 8   # it dies in a chunk of others
    results = workers.in_parallel(dies_at_three, items, 2, (), lost, nothing_shown)
    assert [r for k, r in enumerate(results) if k != 3] == [-k for k in items if k != 3]
    assert "WorkerDied: the process checking this file died" in str(results[3].error)


def test_the_pool_broken_while_chunks_are_handed_out_costs_only_the_dead_item(monkeypatch):
    monkeypatch.setattr(workers, "FORKS", False)
    real = workers.pool_of

    def pool_of(jobs):
        pool, handed = real(jobs), []
        submit = pool.submit

        def slowly(*args):   # the first chunk's worker dies before the next chunk is handed out
            handed.append(submit(*args))
            if len(handed) == 1:
                time.sleep(0.5)
            return handed[-1]
        pool.submit = slowly
        return pool
    monkeypatch.setattr(workers, "pool_of", pool_of)
    results = workers.in_parallel(dies_at_three, [3, 4, 5, 6], 2, (), lost, nothing_shown)
    assert results[1:] == [-4, -5, -6] and "WorkerDied" in str(results[0].error)


def test_results_that_cannot_be_sent_back_are_the_files_errors(way):
    items = list(range(100))
    results = workers.in_parallel(unsendable_at_three, items, 2, (), lost, nothing_shown)
    chunk = next(c for c in workers.chunked(items, 2) if 3 in c)   # its whole chunk: sent as one
    try:
        pickle.dumps(lambda: 3)
    except Exception as e:   # what this Python raises for it, named in the files' errors
        raised = type(e).__name__
    for k, result in enumerate(results):
        if k in chunk:
            assert f"internal error: {raised}: " in str(result.error) and "pickle" in str(result.error)
        else:
            assert result == -k


class Unsendable:
    """A result whose pickling fails with an error that cannot be pickled either."""

    def __reduce__(self):
        class Local(Exception):
            pass
        raise Local("no way back")


def unsendable_error_at_three(item):
    return Unsendable() if item == 3 else -item


def test_an_error_that_cannot_be_sent_back_either_is_named_in_the_files_errors(monkeypatch):
    monkeypatch.setattr(workers, "FORKS", True)
    results = workers.in_parallel(unsendable_error_at_three, list(range(8)), 2, (), lost, nothing_shown)
    assert "internal error: RuntimeError: Local: no way back" in str(results[3].error)
    assert [r for k, r in enumerate(results) if k != 3] == [-k for k in range(8) if k != 3]


def interrupted_after_one(items, label):
    yield from list(items)[:1]
    raise KeyboardInterrupt


def test_an_interrupt_ends_every_forked_worker_at_once(monkeypatch):
    monkeypatch.setattr(workers, "FORKS", True)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        workers.in_parallel(time.sleep, [0.01] + [30] * 7, 2, (), lost, interrupted_after_one)
    assert time.monotonic() - started < 10   # not after the sleeping workers' 30 s
    assert forks.LIVE == set()


def test_workers_that_cannot_start_leave_the_files_to_this_process(monkeypatch):
    real, calls = os.fork, []

    def fork():
        calls.append(1)
        if len(calls) > 1:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return real()
    monkeypatch.setattr(workers, "FORKS", True)
    monkeypatch.setattr(os, "fork", fork)
    assert workers.in_parallel(negated, list(range(50)), 2, (), lost, nothing_shown) == [-k for k in range(50)]
    assert len(calls) == 2 and forks.LIVE == set()


def test_a_file_whose_worker_died_is_lost_when_no_process_is_left_to_retry_it(monkeypatch):
    real, calls = os.fork, []

    def fork():
        calls.append(1)
        if len(calls) > 2:   # the two workers start; the retries one by one do not
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return real()
    monkeypatch.setattr(workers, "FORKS", True)
    monkeypatch.setattr(os, "fork", fork)
    items = list(range(100))
    results = workers.in_parallel(dies_at_three, items, 2, (), lost, nothing_shown)
    dead = workers.chunked(items, 2)[0]
    assert [r for k, r in enumerate(results) if k not in dead] == [-k for k in items if k not in dead]
    assert all("BlockingIOError" in str(results[k].error) for k in dead) and forks.LIVE == set()


def test_forks_leave_no_pipe_open(monkeypatch):
    monkeypatch.setattr(workers, "FORKS", True)
    before = sorted(os.listdir("/proc/self/fd"))
    workers.in_parallel(negated, list(range(50)), 2, (), lost, nothing_shown)
    workers.in_parallel(dies_at_three, list(range(50)), 2, (), lost, nothing_shown)
    with pytest.raises(KeyboardInterrupt):
        workers.in_parallel(negated, list(range(50)), 2, (), lost, interrupted_after_one)
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_forks_send_more_chunk_numbers_than_a_pipe_holds_each_write_whole(monkeypatch):
    """Workers read numbers from one pipe: a number written in part could be read in part."""
    chunks, writes, real = [[k] for k in range(20_000)], [], os.write   # 80 KB; a pipe holds 64 KB
    monkeypatch.setattr(os, "write", lambda fd, data: writes.append((fd, len(data), real(fd, data))) or writes[-1][2])
    with forks.Forks(negated, chunks, (), 2) as running:
        tasks = running.tasks
        for k in range(len(chunks)):
            running.wait_for(k)
    assert [running.results[k] for k in range(len(chunks))] == [[-k] for k in range(20_000)]
    assert forks.LIVE == set()
    sent = [(size, done) for fd, size, done in writes if fd == tasks]   # this process's writes
    assert all(done == size <= select.PIPE_BUF for size, done in sent)
    assert sum(done for _, done in sent) == forks.NUMBER * len(chunks)



def napped(seconds):
    time.sleep(seconds)
    return seconds


def test_a_forked_worker_ignores_ctrl_c_and_ends_with_its_pipe():
    """Only the main process handles Ctrl-C; a worker ends when no chunk is left to take."""
    with forks.Forks(napped, [[0.0], [0.3]], (), 1) as running:
        [pid] = [pid for pid, _ in running.ends.values()]
        running.wait_for(0)                  # it has begun: its own handling is in place
        os.kill(pid, signal.SIGINT)          # during the second chunk
        running.wait_for(1)
    assert running.results == {0: [0.0], 1: [0.3]} and pid not in forks.LIVE


def test_a_message_is_read_whole_however_the_pipe_splits_it():
    large = list(range(300_000))             # about 1.5 MB pickled: many reads of a pipe
    with forks.Forks(lambda item: large, [[0]], (), 1) as running:
        running.wait_for(0)
    assert running.results[0] == [large]
