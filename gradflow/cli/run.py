"""What the commands do between parsing flags and rendering: find model files,
load and analyse them (in parallel for ``-j``), pick the renderer, decide the exit code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import click
import numpy as np

import gradflow
from gradflow.analysis.analyze import analyze as analyze_model
from gradflow.analysis.settings import settings_for
from gradflow.cli.main import Exit
from gradflow.errors import ModelError, did_you_mean
from gradflow.importers import is_python_target

MODEL_MARK = re.compile(r"^gradflow\s*:", re.MULTILINE)


@dataclass
class Result:
    """One checked file: its report, or the error that made it invalid."""
    path: str
    report: object = None
    error: ModelError | None = None
    warnings: list = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.report is not None and self.report.failed


def analyze_file(path, losses=(), dims=None, seed=None, dtype="float64", structural=False,
                 max_memory=None, weights=None, counterfactual=True, overrides=None):
    model = gradflow.load(path, dims=dims or None, seed=seed, weights=weights, dtype=dtype)
    if losses:
        model.keep_losses(losses)
    overrides = dict(overrides or {})
    if max_memory is not None:
        overrides["max-memory"] = max_memory
    settings = settings_for(model, overrides)
    report = analyze_model(model, structural=structural, counterfactual=counterfactual,
                           settings=settings, version=gradflow.__version__)
    return report, model


def why(path, param, losses=(), limit=20, structural=False, max_memory=None, **load):
    """[(loss, Pair, [Path], left out)] for each loss: the status, the first ``limit`` paths
    from ``param`` and how many more there are."""
    from gradflow.analysis.flow import Graph
    from gradflow.analysis.paths import entry_graph as build_entry_graph
    from gradflow.analysis.paths import label, paths
    report, model = analyze_file(path, losses=losses, structural=structural, max_memory=max_memory,
                                 counterfactual=False, **load)
    if param not in model.params:
        raise ModelError(f"no parameter {param!r}{did_you_mean(param, model.params)}", model.path, 1, 1)
    graph = Graph(model.tape, model.params)
    _, edges = build_entry_graph(model, graph)
    results = []
    for name, loss in model.losses.items():
        pair, found, total = report.pair(param, name), [], 0
        if pair.status != "unreachable":
            found, total = paths(edges, param, label(loss), limit)
        results.append((name, pair, found, total - len(found)))
    return results


def entry_graph(path, losses=(), dims=None):
    """(nodes, edges, kinds, roots) of a model, for `gradflow graph`: with ``losses``, only
    what reaches them."""
    from gradflow.analysis.flow import Graph
    from gradflow.analysis.paths import entry_graph as build_entry_graph
    from gradflow.analysis.paths import label, reaching
    model = gradflow.load(path, dims=dims or None)
    if losses:
        model.keep_losses(losses)
    entries, edges = build_entry_graph(model, Graph(model.tape, model.params))
    roots = [label(t) for t in model.losses.values()]
    if losses:
        keep = reaching(edges, roots)
        entries = [n for n in entries if n in keep]
        edges = [e for e in edges if e.src in keep and e.dst in keep]
    kinds = {**{n: "input" for n in model.inputs}, **{n: "param" for n in model.params}}
    return entries, edges, kinds, roots


def cli_settings(select="", ignore="", strict=None, max_memory=None) -> dict:
    out = {}
    if select:
        out["select"] = select
    if ignore:
        out["ignore"] = ignore
    if strict:
        out["strict"] = True
    if max_memory is not None:
        out["max-memory"] = max_memory
    return out


def model_files(paths) -> list:
    """Files named explicitly, and in directories every *.yaml/*.yml with a top-level gradflow: key."""
    files = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for candidate in sorted(path.rglob("*")):
                if candidate.suffix in (".yaml", ".yml") and candidate.is_file() and is_model(candidate):
                    files.append(str(candidate))
        elif path.exists() or is_python_target(raw):   # FILE.py:FUNC is imported, never scanned for
            files.append(str(path) if path.exists() else raw)
        else:
            raise ModelError("no such file or directory", str(path), 1, 1)
    return files


def is_model(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20).decode("utf-8", errors="replace")
    except OSError:
        return False
    return bool(MODEL_MARK.search(head))


def check_one(path, overrides, options) -> Result:
    try:
        report, model = analyze_file(path, overrides=overrides, **options)
    except ModelError as e:
        return Result(path, error=e)
    report.grads = {}   # not needed by check; keeps results light across processes
    return Result(path, report, warnings=model.warnings)


def check_files(files, overrides, jobs=1, **options) -> list:
    from gradflow.cli.render.console import progress
    if jobs > 1 and len(files) > 1:
        from concurrent.futures import ProcessPoolExecutor   # only here: it loads multiprocessing
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(check_one, f, overrides, options) for f in files]
            return [future.result() for future in progress(futures, "checking")]
    return [check_one(f, overrides, options) for f in progress(files, "checking")]


def check_exit_code(results) -> Exit:
    if any(r.error for r in results):
        return Exit.INVALID
    return Exit.FAILED if any(r.failed for r in results) else Exit.OK


def print_warnings(warnings) -> None:
    for w in warnings:
        click.echo(f"warning: {w}", err=True)


def save_grads(report, path) -> None:
    arrays = {f"{loss}/{param}": np.asarray(g) for (loss, param), g in report.grads.items()}
    np.savez(path, **arrays)


def render_report(report, fmt: str, no_color: bool) -> None:
    from gradflow.cli.render import FORMATS
    FORMATS[fmt].render_report(report, no_color)


def render_check(results, fmt: str, no_color: bool) -> None:
    from gradflow.cli.render import FORMATS
    for r in results:
        print_warnings(r.warnings)
        if r.error is not None:   # an invalid model is always one located line on stderr
            click.echo(str(r.error), err=True)
    FORMATS[fmt].render_check(results, no_color)


def import_torch(target: str, output: str | None, weights_out: str | None) -> None:
    """`gradflow import torch`: the model file to OUTPUT (or stdout), the arrays to an .npz."""
    import os

    from gradflow.importers import import_python
    if weights_out is None and output is not None:
        weights_out = str(Path(output).with_suffix(".npz"))
    source = target.rsplit(":", 1)[0]
    for out in filter(None, (output, weights_out)):
        if Path(out).exists() and os.path.samefile(out, source):
            raise ModelError(f"{out} is the Python file being imported; choose another output", out, 1, 1)
        if not Path(out).resolve().parent.is_dir():
            raise ModelError("the output's directory does not exist", out, 1, 1)
    imported = import_python(target)
    base = str(Path(output).resolve().parent) if output else os.getcwd()
    text = imported.to_yaml(base)
    if weights_out:
        np.savez(weights_out, **imported.arrays)
    if output:
        Path(output).write_text(text, encoding="utf-8")
        click.echo(f"wrote {output}" + (f" and {weights_out}" if weights_out else ""), err=True)
    else:
        click.echo(text, nl=False)
