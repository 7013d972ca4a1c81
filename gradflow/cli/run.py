"""What the commands do between parsing flags and rendering: find model files,
load and analyse them (in parallel for ``-j``), pick the renderer, decide the exit code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import click
import numpy as np

import gradflow
from gradflow.analysis.analyze import analyze as analyze_model
from gradflow.analysis.settings import settings_for
from gradflow.cli import collector
from gradflow.cli.escape import shown
from gradflow.cli.exits import Exit
from gradflow.errors import ModelError, did_you_mean
from gradflow.model.spec import Place


@dataclass(eq=False, repr=False)
class Result:
    """One checked file: its report, or the error that made it invalid."""
    path: str
    report: object = None
    error: ModelError | None = None
    warnings: list = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.report is not None and self.report.failed


def start_work() -> None:
    """The model layer loaded (``gradflow.load`` would import it on first use), the garbage
    collector runs again: from here on a command makes garbage (see collector.py)."""
    import gradflow.api   # noqa: F401
    collector.resume()


def analyze_file(path, losses=(), dims=None, seed=None, dtype="float64", structural=False,
                 max_memory=None, weights=None, counterfactual=True, overrides=None):
    start_work()
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
    """(frozen, [(loss, Pair, [Path], left out)]): whether ``param`` is frozen, and for each loss
    the status, the first ``limit`` paths from ``param`` and how many more there are."""
    from gradflow.analysis.flow import Graph
    from gradflow.analysis.paths import entry_graph as build_entry_graph
    from gradflow.analysis.paths import label, paths
    report, model = analyze_file(path, losses=losses, structural=structural, max_memory=max_memory,
                                 counterfactual=False, **load)
    if param not in model.params:
        hint = did_you_mean(param, model.params)
        if param in model.inputs:
            hint = " (it is an input: only parameters are followed)"
        elif not hint:
            names = list(model.params)
            hint = f" (it has {', '.join(names[:8])}{', ...' if len(names) > 8 else ''})" if names else ""
        first = next(iter(model.params), None)      # at the parameters the file declares
        raise model.error(f"no parameter {param!r}{hint}", model.sources[first] if first else Place(1, 1))
    graph = Graph(model.tape, model.params)
    _, edges = build_entry_graph(model, graph)
    results = []
    for name, loss in model.losses.items():
        pair, found, total = report.pair(param, name), [], 0
        if pair.status != "unreachable":
            found, total = paths(edges, param, label(loss), limit)
        results.append((name, pair, found, total - len(found)))
    return param in model.frozen, results


def entry_graph(path, losses=(), dims=None):
    """(nodes, edges, kinds, roots) of a model, for `gradflow graph`: with ``losses``, only
    what reaches them."""
    from gradflow.analysis.flow import Graph
    from gradflow.analysis.paths import entry_graph as build_entry_graph
    from gradflow.analysis.paths import label, reaching
    start_work()
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


def check_flags(overrides: dict, ctx) -> None:
    """The flags' settings as a layer of settings is checked (each flag's value was already):
    what they get wrong together (a rule both selected and ignored) is a usage error, before
    any model, not an error of every model."""
    from gradflow.analysis.settings import SettingsError, checked
    try:
        checked(overrides)
    except SettingsError as e:
        raise click.UsageError(f"--select and --ignore: {e.message}", ctx) from None


def find_models(paths) -> list:
    """What `check` checks: paths, or errors for paths that cannot be read; exit 2 when the
    paths hold no model at all (a CI job that checks nothing must not pass)."""
    from gradflow.cli.discover import model_files
    items, warnings = model_files(paths)
    print_warnings(warnings)
    if not items:
        click.echo(shown(f"gradflow: error: no model files found in {', '.join(paths)}"), err=True)
        raise click.exceptions.Exit(Exit.INVALID)
    return items


def check_one(item, overrides, options, debug=False) -> Result:
    """One file's result; ``item`` is a path, or the ModelError that says why it cannot be read.
    Whatever goes wrong is this file's result: the other files are still checked."""
    if isinstance(item, ModelError):
        return Result(item.path, error=item)
    try:
        report, model = analyze_file(item, overrides=overrides, **options)
    except ModelError as e:
        return Result(item, error=e)
    except Exception as e:   # a bug in gradflow, reported for this file
        if debug:
            import traceback
            traceback.print_exc()
        return lost(item, e)
    report.grads = {}   # not needed by check; keeps results light across processes
    return Result(item, report, warnings=model.warnings)


def lost(item, error: Exception) -> Result:
    path = item.path if isinstance(item, ModelError) else item
    return Result(path, error=ModelError(f"internal error: {type(error).__name__}: {error} "
                                         "(rerun with --debug)", path, 1, 1))


def check_files(items, overrides, jobs=1, debug=False, no_color=False, **options) -> list:
    from functools import partial
    from gradflow.cli.render.lines import progress
    start_work()   # the API is loaded before forking: workers start with it
    progress = partial(progress, no_color=no_color)
    if jobs > 1 and len(items) > 1:
        from gradflow.cli.workers import in_parallel
        return in_parallel(check_one, items, jobs, (overrides, options, debug), lost, progress)
    return [check_one(item, overrides, options, debug) for item in progress(items, "checking")]


def check_exit_code(results) -> Exit:
    if any(r.error for r in results):
        return Exit.INVALID
    return Exit.FAILED if any(r.failed for r in results) else Exit.OK


def print_warnings(warnings) -> None:
    """InputWarnings, as the findings' lines are: 'PATH[:LINE:COL]: warning: message'."""
    for warning in warnings:
        click.echo(shown(str(warning)), err=True)


def check_save_target(path, inputs, structural=False) -> None:
    from gradflow.cli.save import check_target, usage
    if structural:
        raise usage("a structural run has no gradients to save; drop --structural")
    check_target(path, inputs)


def save_grads(report, path) -> None:
    from gradflow.cli.save import write_atomically
    write_atomically(path, {f"{loss}/{param}": np.asarray(g) for (loss, param), g in report.grads.items()})


def render_report(report, fmt: str, no_color: bool, **view) -> None:
    """``view``: expand/problems, options of the table that the documents ignore."""
    from gradflow.cli.render import FORMATS
    if fmt == "table":
        FORMATS[fmt].render_report(report, no_color, **view)
    else:
        FORMATS[fmt].render_report(report, no_color)


def render_check(results, fmt: str, no_color: bool) -> None:
    from gradflow.cli.render import FORMATS, first_errors
    for r, first in first_errors(results):
        print_warnings(r.warnings)
        if first:   # an invalid model: one located line on stderr
            click.echo(shown(r.error), err=True)
    FORMATS[fmt].render_check(results, no_color)


def import_torch(target: str, output: str | None, weights_out: str | None) -> None:
    """`gradflow import torch`: the model file to OUTPUT (or stdout), the arrays to an .npz."""
    import os

    from gradflow.importers import import_python
    start_work()
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
