"""Models at scale: a million-node chain, and a model with 200 stop-gradients.

Run from the repository root:  python benchmarks/scale.py [--quick]

1. a chain of 1,000,000 nodes built with ``repeat`` (one tanh per block), through
   ``gradflow.load`` and ``gradflow.analyze`` in a fresh process: it must run, at no
   more than 600 bytes and 10 microseconds per tape node (peak resident memory over
   the process's start, and wall time, each divided by the node count);
2. a model with 200 stop-gradients (200 branches, each stopped on the way to the
   loss), analysed with counterfactuals (the norm each stop removes, and every
   pair's norm with all stops open) against without (goal <= 1.3x).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from common import ROOT, clean_env, interleaved, row

import gradflow  # noqa: E402


def chain_yaml(n: int) -> str:
    """A chain of ``n`` tape nodes: the parameter, n - 2 tanh blocks and the loss."""
    return (f"gradflow: 1\nname: long_chain\nparams:\n  w: {{shape: [4], init: normal}}\n"
            f"modules:\n  step:\n    inputs: [x]\n    graph:\n      y: tanh(x)\n    output: y\n"
            f"graph:\n  h: repeat(step, w, times={n - 2})\n  loss: sum(h)\nlosses: [loss]\n")


def run_chain(n: int) -> None:
    """In this (fresh) process: build and analyse the chain, print a JSON line of figures."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "chain.yaml")
        with open(path, "w") as f:
            f.write(chain_yaml(n))
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        start = time.perf_counter()
        model = gradflow.load(path)
        report = gradflow.analyze(model)
        took = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print(json.dumps({"nodes": len(model.tape.nodes), "seconds": took, "bytes": peak - base,
                          "status": report.status("w", "loss")}))


def bench_chain(quick: bool) -> None:
    n = 100_000 if quick else 1_000_000
    done = subprocess.run([sys.executable, __file__, "--chain-only", str(n)], cwd=ROOT, env=clean_env(),
                          capture_output=True, text=True)
    if done.returncode:
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["?"]
        print(f"{f'{n}-node chain (repeat)':44s} does not run: {last[0]}")
        return
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    nodes = figures["nodes"]
    print(f"{f'{n}-node chain (repeat)':44s} {figures['seconds']:6.1f} s, "
          f"{figures['bytes'] / nodes:6.0f} B/node, {figures['seconds'] / nodes * 1e6:5.2f} us/node"
          f"  ({nodes} tape nodes)  goal <= 600 B/node, <= 10 us/node")


def stops_yaml(branches: int) -> str:
    lines = ["gradflow: 1", "name: many_stops", "dims: {batch: 16, width: 16}",
             "inputs:", "  x: {shape: [batch, width]}", "params:"]
    lines += [f"  w{i}: {{shape: [width, width]}}" for i in range(branches)]
    lines += ["  head: {shape: [width, width]}", "graph:", "  base: tanh(x @ head)"]
    for i in range(branches):
        # every branch sees the trainable head twice: once stopped, once not
        lines.append(f"  b{i}: tanh(base @ w{i}) + stop_gradient(tanh(base @ w{i}))")
    lines.append("  loss: mean(" + " + ".join(f"b{i}" for i in range(branches)) + ")")
    lines.append("losses: [loss]")
    return "\n".join(lines) + "\n"


def bench_stops(quick: bool) -> None:
    branches = 50 if quick else 200
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "stops.yaml")
        with open(path, "w") as f:
            f.write(stops_yaml(branches))
        model = gradflow.load(path)
        gradflow.analyze(model)          # forward pass once: both sides time the analysis only
        with_cf, without = interleaved(lambda: gradflow.analyze(model, counterfactual=True),
                                       lambda: gradflow.analyze(model, counterfactual=False), 5 if quick else 31)
        row(f"{branches} stops, counterfactuals vs without", with_cf, without, "<= 1.3x")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller chain, fewer stops")
    parser.add_argument("--chain-only", type=int, help=argparse.SUPPRESS)  # used by bench_chain
    opts = parser.parse_args(argv)
    if opts.chain_only:
        run_chain(opts.chain_only)
        return
    bench_chain(opts.quick)
    bench_stops(opts.quick)


if __name__ == "__main__":
    main()
