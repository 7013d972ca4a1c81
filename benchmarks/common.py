"""What every benchmark shares: interleaved timing, fresh interpreters, one printed row.

The machines this runs on have two noisy cores, so a figure is never a raw time:
the two sides of a comparison run interleaved (a burst of load from elsewhere hits
both), and the figure is the median of the per-pair ratios. Nothing is asserted.
"""

from __future__ import annotations

import gc
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def interleaved(a, b, repeats: int, clock=time.perf_counter) -> tuple[list, list]:
    """Times of a() and b(), alternating; garbage from one run is collected outside the timing."""
    times_a, times_b = [], []
    for _ in range(repeats):
        for f, times in ((a, times_a), (b, times_b)):
            gc.collect()
            start = clock()
            f()
            times.append(clock() - start)
    return times_a, times_b


def median_ratio(ours: list, floor: list) -> float:
    return statistics.median(x / y for x, y in zip(ours, floor))


def row(label: str, ours: list, floor: list, goal: str, unit: str = "ms", scale: float = 1e3) -> float:
    """Print one comparison: medians of both sides, the median per-pair ratio, the goal."""
    ratio = median_ratio(ours, floor)
    print(f"{label:44s} {statistics.median(ours) * scale:9.2f} {unit} vs {statistics.median(floor) * scale:9.2f} {unit}"
          f"  ratio {ratio:5.2f}x  goal {goal}", flush=True)
    return ratio


def clean_env(**extra) -> dict:
    """The environment of a fresh interpreter that imports this checkout, bytecode caching on."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def command_timer(args: list, env: dict | None = None, cwd: str = ROOT):
    """A function that runs ``args`` in a fresh process (output discarded); one warm-up run first."""
    env = env or clean_env()

    def run():
        subprocess.run(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run()   # writes bytecode caches, warms the page cache
    return run


def python(*args: str) -> list:
    return [sys.executable, *args]
