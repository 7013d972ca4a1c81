"""Engine benchmarks: the tape against hand-written numpy, and the import time.

Run from the repository root:  python benchmarks/engine.py [--quick]

Prints three comparisons, never asserts (timings on shared machines are noisy):
1. per-op overhead: a chain of tiny elementwise ops, tape forward+backward
   against the same chain written by hand in numpy (goal: at most 2.5x);
2. a tanh MLP (8 layers, 1024 wide, batch 256) forward+backward against numpy
   (goal: at most 1.05x: the tape should add nothing measurable to big ops),
   twice: as the process starts, and with glibc keeping freed memory for reuse.
   A tape keeps every node's value and gradient (the analysis reads them), where
   hand-written numpy frees them at once; in fresh memory that costs first-touch
   page faults, with reuse it costs nothing;
3. importing the API (``from gradflow import load, analyze``) against ``import numpy``
   in fresh interpreters (``import gradflow`` alone loads its names on first use).

The two sides of each comparison run interleaved, so a burst of load from
elsewhere hits both; the median of the per-pair ratios is the figure to read,
best against best is printed beside it. The tiny-op chain is timed in CPU time
of its thread (preemption by other processes does not count); the MLP, whose
BLAS calls use several threads, in wall time.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gradflow.engine import OPS, Tape  # noqa: E402  (after the path is set)


# ---------------------------------------------------------------- 1. chain of tiny ops
def chain_kinds(n):
    return [i % 3 for i in range(n)]  # sin, tanh, multiply by a constant vector


def tape_chain(kinds, x0, w0):
    tape = Tape()
    x, w = tape.param(x0), tape.constant(w0)
    sin, tanh, mul = OPS["sin"], OPS["tanh"], OPS["mul"]
    h = x
    for k in kinds:
        h = tape.apply(sin, h) if k == 0 else tape.apply(tanh, h) if k == 1 else tape.apply(mul, h, w)
    return tape.backward(tape.apply("sum", h))[x.index]


def numpy_chain(kinds, x0, w0):
    values, h = [x0], x0
    for k in kinds:
        h = np.sin(h) if k == 0 else np.tanh(h) if k == 1 else h * w0
        values.append(h)
    g = np.ones_like(h)
    for i in range(len(kinds) - 1, -1, -1):
        k = kinds[i]
        g = g * np.cos(values[i]) if k == 0 else g * (1 - values[i + 1] ** 2) if k == 1 else g * w0
    return g


# ---------------------------------------------------------------- 2. MLP
def mlp_weights(layers, width, rng):
    return [(rng.normal(size=(width, width)) / np.sqrt(width), np.zeros(width)) for _ in range(layers)]


def tape_mlp(x0, weights):
    tape = Tape()
    h = tape.leaf(x0)
    params = []
    for w0, b0 in weights:
        w, b = tape.param(w0), tape.param(b0)
        params += [w, b]
        h = tape.apply("tanh", tape.apply("add", tape.apply("matmul", h, w), b))
    grads = tape.backward(tape.apply("mean", h))
    return [grads[p.index] for p in params]


def numpy_mlp(x0, weights):
    hs = [x0]
    for w, b in weights:
        hs.append(np.tanh(hs[-1] @ w + b))
    g = np.full(hs[-1].shape, 1 / hs[-1].size)
    grads = []
    for i in range(len(weights) - 1, -1, -1):
        g = g * (1 - hs[i + 1] * hs[i + 1])
        grads[:0] = [hs[i].T @ g, g.sum(axis=0)]
        if i:
            g = g @ weights[i][0].T
    return grads


# ---------------------------------------------------------------- timing
def interleaved(a, b, repeats, clock=time.perf_counter):
    """Times of a() and b(), alternating; garbage from a run is collected outside the timing."""
    times = {a: [], b: []}
    for _ in range(repeats):
        for f in (a, b):
            gc.collect()
            start = clock()
            f()
            times[f].append(clock() - start)
    return times[a], times[b]


def report(label, ours, floor, unit_scale, unit, goal):
    """Medians of both sides, the median of the per-pair ratios, and best against best."""
    pair_ratio = statistics.median(x / y for x, y in zip(ours, floor))
    best_ratio = min(ours) / min(floor)
    print(f"{label:34s} tape {statistics.median(ours) * unit_scale:8.2f} {unit}  "
          f"numpy {statistics.median(floor) * unit_scale:8.2f} {unit}  "
          f"ratio {pair_ratio:5.2f}x (median)  {best_ratio:5.2f}x (best)  goal <= {goal}x")


def import_time(statement, repeats):
    """Wall times of fresh interpreters running ``statement``.

    Bytecode caching is switched back on (some shells turn it off) and one
    warm-up run writes the cache, as an installed package would have it.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, "-c", statement]
    subprocess.run(command, check=True, cwd=ROOT, env=env)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, check=True, cwd=ROOT, env=env)
        times.append(time.perf_counter() - start)
    return times


# glibc settings under which freed memory stays in the process for reuse, as in
# the steady state of a long training loop: the tape then pays no first-touch
# page faults for the values and gradients it keeps (the analysis reads them all).
REUSE_MEMORY = {"MALLOC_TRIM_THRESHOLD_": str(2 ** 32), "MALLOC_MMAP_THRESHOLD_": str(2 ** 30)}


def bench_chain(quick, rng) -> None:
    kinds, x0, w0 = chain_kinds(1000), rng.normal(size=4), np.full(4, 0.9)
    assert np.allclose(tape_chain(kinds, x0, w0), numpy_chain(kinds, x0, w0))
    # CPU time of this (single) thread: other processes taking the core do not count.
    ours, floor = interleaved(lambda: tape_chain(kinds, x0, w0), lambda: numpy_chain(kinds, x0, w0),
                              20 if quick else 200, clock=time.thread_time)
    report("1000 tiny ops, fwd+bwd (cpu)", ours, floor, 1e3, "ms", 2.5)
    print(f"{'':34s} per op: tape {statistics.median(ours) * 1e6 / 1000:.2f} us, "
          f"numpy {statistics.median(floor) * 1e6 / 1000:.2f} us")


def bench_mlp(quick, rng, label) -> None:
    layers, width, batch = (8, 256, 64) if quick else (8, 1024, 256)
    weights, xb = mlp_weights(layers, width, rng), rng.normal(size=(batch, width))
    for got, want in zip(tape_mlp(xb, weights), numpy_mlp(xb, weights)):
        assert np.allclose(got, want)
    ours, floor = interleaved(lambda: tape_mlp(xb, weights), lambda: numpy_mlp(xb, weights),
                              5 if quick else 15)
    report(f"MLP {layers}x{width}, b{batch} {label}", ours, floor, 1e3, "ms", 1.05)


def bench_import(quick) -> None:
    n = 5 if quick else 15
    floor, took = min(import_time("import numpy", n)), min(import_time("from gradflow import load, analyze", n))
    print(f"{'import gradflow API vs numpy':34s} gradflow {took * 1e3:6.1f} ms  numpy {floor * 1e3:6.1f} ms  "
          f"(best of {n}; gradflow adds {(took - floor) * 1e3:.1f} ms, "
          f"of which the engine {engine_import_share(n) * 1e3:.1f} ms)")


def engine_import_share(repeats) -> float:
    """Best cumulative import time of gradflow.engine, as ``python -X importtime`` reports it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    best = float("inf")
    for _ in range(repeats):
        err = subprocess.run([sys.executable, "-X", "importtime", "-c", "from gradflow import load, analyze"], cwd=ROOT,
                             env=env, check=True, capture_output=True, text=True).stderr
        for line in err.splitlines():
            parts = line.split("|")  # "import time: self | cumulative | name"
            if len(parts) == 3 and parts[2].strip() == "gradflow.engine":
                best = min(best, int(parts[1]) / 1e6)
    return best


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller MLP")
    parser.add_argument("--mlp-only", help=argparse.SUPPRESS)  # label; used by the run below
    opts = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    if opts.mlp_only:
        bench_mlp(opts.quick, rng, opts.mlp_only)
        return
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, {os.cpu_count()} cores")
    bench_chain(opts.quick, rng)
    bench_mlp(opts.quick, rng, "(fresh memory)")
    subprocess.run([sys.executable, __file__, "--mlp-only", "(memory reused)"] + ["--quick"] * opts.quick,
                   check=True, env={**os.environ, **REUSE_MEMORY})
    bench_import(opts.quick)


if __name__ == "__main__":
    main()
