"""The whole path a user runs (load, build, forward, backward, analysis) against numpy.

Run from the repository root:  python benchmarks/whole_path.py [--quick]

1. 10,000 tiny ops on 4x4 arrays, as a model file through ``gradflow.load`` and
   ``gradflow.analyze``, against the same chain hand-written in numpy, forward and
   backward (goal <= 4x);
   with, for reference, what libyaml alone takes to read that file's events (no goal:
   the part of the first figure that no YAML model file avoids);
2. the same chain on the engine alone (``Tape.apply`` and ``Tape.backward``), against
   the same numpy (goal <= 2x; PyTorch eager is about 5.6x, HIPS autograd 9x);
3. a tanh MLP (8 layers of 1024, batch 256) as a model file, whole path, against
   numpy that draws the same weights and runs forward and backward, in float64 and
   float32, with one BLAS thread on both sides (goal <= 1.03x).

The tiny-op figures are CPU time of this thread (preemption by other processes
does not count); the MLP runs in a fresh process per dtype, in wall time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import yaml

from common import ROOT, clean_env, interleaved, row

import gradflow  # noqa: E402
from gradflow.engine import OPS, Tape  # noqa: E402

KINDS = ("sin", "tanh", "mul")   # one op each step, in turn: sin, tanh, times a constant


# ---------------------------------------------------------------- tiny ops
def chain_yaml(n: int) -> str:
    lines = ["gradflow: 1", "name: chain", "params:", "  x: {shape: [4, 4], init: normal}",
             "inputs:", "  w: {shape: [4, 4], init: constant(0.9)}", "graph:", "  h0: x"]
    for i in range(n):
        kind, prev = KINDS[i % 3], f"h{i}"
        lines.append(f"  h{i + 1}: {prev} * w" if kind == "mul" else f"  h{i + 1}: {kind}({prev})")
    lines += [f"  loss: sum(h{n})", "losses: [loss]"]
    return "\n".join(lines) + "\n"


def tape_chain(n, x0, w0):
    tape = Tape()
    x, w = tape.param(x0), tape.leaf(w0)
    ops = [OPS[k] for k in KINDS]
    h = x
    for i in range(n):
        op = ops[i % 3]
        h = tape.apply(op, h, w) if op.name == "mul" else tape.apply(op, h)
    return tape.backward(tape.apply("sum", h))[x.index]


def numpy_chain(n, x0, w0):
    values, h = [x0], x0
    for i in range(n):
        k = i % 3
        h = np.sin(h) if k == 0 else np.tanh(h) if k == 1 else h * w0
        values.append(h)
    g = np.ones_like(h)
    for i in range(n - 1, -1, -1):
        k = i % 3
        g = g * np.cos(values[i]) if k == 0 else g * (1 - values[i + 1] ** 2) if k == 1 else g * w0
    return g


def whole_chain(path):
    model = gradflow.load(path)
    report = gradflow.analyze(model)
    return report.grad("x", "loss")


def bench_tiny(quick: bool) -> None:
    n = 2_000 if quick else 10_000
    x0, w0 = np.random.default_rng(0).normal(size=(4, 4)), np.full((4, 4), 0.9)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "chain.yaml")
        with open(path, "w") as f:
            f.write(chain_yaml(n))
        model_x = gradflow.load(path)
        model_x.materialize()
        x_start = model_x.params["x"].value
        assert np.allclose(whole_chain(path), numpy_chain(n, x_start, w0))
        repeats = 5 if quick else 15
        ours, floor = interleaved(lambda: whole_chain(path), lambda: numpy_chain(n, x_start, w0), repeats,
                                  clock=time.thread_time)
        row(f"{n} tiny ops, whole path vs numpy (cpu)", ours, floor, "<= 4x")
        # What any YAML model pays before its first op: libyaml's event stream of the same
        # file, nothing built from it. Shown to read the row above by, not a goal.
        text = chain_yaml(n)
        events, floor = interleaved(lambda: list(yaml.parse(text, Loader=yaml.CSafeLoader)),
                                    lambda: numpy_chain(n, x_start, w0), repeats, clock=time.thread_time)
        row("  libyaml's events of that file alone (cpu)", events, floor, "none: a reference")
    assert np.allclose(tape_chain(n, x0, w0), numpy_chain(n, x0, w0))
    ours, floor = interleaved(lambda: tape_chain(n, x0, w0), lambda: numpy_chain(n, x0, w0),
                              10 if quick else 40, clock=time.thread_time)
    row(f"{n} tiny ops, engine fwd+bwd vs numpy (cpu)", ours, floor, "<= 2x")


# ---------------------------------------------------------------- MLP
def mlp_yaml(layers: int, width: int, batch: int) -> str:
    lines = ["gradflow: 1", "name: mlp", f"dims: {{batch: {batch}, width: {width}}}",
             "inputs:", "  x: {shape: [batch, width]}", "params:"]
    for i in range(layers):
        lines += [f"  w{i}: {{shape: [width, width], init: normal(0, {1 / np.sqrt(width):.6g})}}",
                  f"  b{i}: {{shape: [width]}}"]
    lines += ["graph:", "  h0: x"]
    lines += [f"  h{i + 1}: tanh(h{i} @ w{i} + b{i})" for i in range(layers)]
    lines += [f"  loss: mean(h{layers})", "losses: [loss]"]
    return "\n".join(lines) + "\n"


def numpy_mlp(layers, width, batch, dtype, seed):
    """Draw the weights as a model file would, then forward and backward by hand."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, width)).astype(dtype)
    weights = [(rng.normal(0, 1 / np.sqrt(width), size=(width, width)).astype(dtype), np.zeros(width, dtype))
               for _ in range(layers)]
    hs = [x]
    for w, b in weights:
        hs.append(np.tanh(hs[-1] @ w + b))
    g = np.full(hs[-1].shape, 1 / hs[-1].size, dtype)
    grads = []
    for i in range(layers - 1, -1, -1):
        g = g * (1 - hs[i + 1] * hs[i + 1])
        grads[:0] = [hs[i].T @ g, g.sum(axis=0)]
        if i:
            g = g @ weights[i][0].T
    return grads


def mlp_only(quick: bool, dtype: str) -> None:
    layers, width, batch = (8, 256, 64) if quick else (8, 1024, 256)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "mlp.yaml")
        with open(path, "w") as f:
            f.write(mlp_yaml(layers, width, batch))

        def ours():
            gradflow.analyze(gradflow.load(path, dtype=dtype), counterfactual=True)
        times_ours, times_floor = interleaved(ours, lambda: numpy_mlp(layers, width, batch, dtype, 0),
                                              5 if quick else 11)
        row(f"MLP {layers}x{width} b{batch} {dtype}, whole path vs numpy", times_ours, times_floor, "<= 1.03x")


def bench_mlp(quick: bool) -> None:
    one_thread = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    for dtype in ("float64", "float32"):
        subprocess.run([sys.executable, __file__, "--mlp-only", dtype] + ["--quick"] * quick,
                       check=True, cwd=ROOT, env=clean_env(**one_thread))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller sizes")
    parser.add_argument("--mlp-only", help=argparse.SUPPRESS)  # a dtype; used by bench_mlp
    opts = parser.parse_args(argv)
    if opts.mlp_only:
        mlp_only(opts.quick, opts.mlp_only)
        return
    bench_tiny(opts.quick)
    bench_mlp(opts.quick)


if __name__ == "__main__":
    main()
