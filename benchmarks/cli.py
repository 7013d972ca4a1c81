"""The CLI as CI runs it: start-up against its import floor, and ``check -j 2`` against ``-j 1``.

Run from the repository root:  python benchmarks/cli.py [--quick]

1. ``gradflow check`` of a tiny model against ``python -c "import numpy, yaml, click,
   rich.console, rich.table"``: what gradflow adds to the libraries it must load anyway
   (goal <= 1.15x);
2. ``gradflow check models/`` (the whole zoo) against the same floor (goal <= 1.3x);
3. ``gradflow check -j 2`` of 200 small models against ``-j 1``, as a speed-up
   (goal >= 1.7x on two cores), followed by what two busy processes at once gain on
   the same machine over one after the other: no ``-j`` beats that ceiling.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

from common import ROOT, command_timer, interleaved, python, row

FLOOR = python("-c", "import numpy, yaml, click, rich.console, rich.table")
TINY = os.path.join("models", "stop_gradient_tape.yaml")


def gradflow(*args: str) -> list:
    return python("-m", "gradflow.cli.main", *args)


def bench_start(quick: bool) -> None:
    n = 7 if quick else 25
    floor = command_timer(FLOOR)
    ours, base = interleaved(command_timer(gradflow("check", TINY)), floor, n)
    row("check of a tiny model vs import floor", ours, base, "<= 1.15x")
    ours, base = interleaved(command_timer(gradflow("check", "models")), floor, n)
    row("check models/ (the zoo) vs import floor", ours, base, "<= 1.3x")


def bench_jobs(quick: bool) -> None:
    count = 40 if quick else 200
    folder = tempfile.mkdtemp(prefix="gradflow-bench-")
    try:
        source = os.path.join(ROOT, "models", "actor_critic.yaml")
        for i in range(count):
            shutil.copy(source, os.path.join(folder, f"m{i:03d}.yaml"))
        one = command_timer(gradflow("check", "-j", "1", folder))
        two = command_timer(gradflow("check", "-j", "2", folder))
        serial, parallel = interleaved(one, two, 3 if quick else 5)
        # Reported as the speed-up of -j 2: serial time over parallel time.
        row(f"check -j 1 vs -j 2, {count} files (speed-up)", serial, parallel, ">= 1.7x", "s", 1.0)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    # The machine's own ceiling, to read the row above by: the same pure-Python loop twice,
    # in one process after the other against in two processes at once (start-up included).
    loop = "sum(range(60_000_000))"
    one = command_timer(python("-c", f"{loop}; {loop}"))
    two = command_timer(["sh", "-c", f"{sys.executable} -c '{loop}' & {sys.executable} -c '{loop}'; wait"])
    serial, parallel = interleaved(one, two, 3 if quick else 5)
    row("  two busy processes at once (speed-up)", serial, parallel, "none: the ceiling", "s", 1.0)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and files")
    opts = parser.parse_args(argv)
    bench_start(opts.quick)
    bench_jobs(opts.quick)


if __name__ == "__main__":
    main()
