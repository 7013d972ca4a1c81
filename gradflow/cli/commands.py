"""The commands other than check (analyze, why, graph, gradcheck, import torch, schema, ops),
added to the group of main.py when one of them is named: a check never makes their options.
"""

from __future__ import annotations

import math
import sys

import click

from gradflow.cli.exits import Exit
from gradflow.cli.options import (common_model_options, dim_option, fail_on_model_error, group_flags, seed_option,
                                  with_options)


def positive_float(ctx, param, value):
    """A finite number above zero (--eps) or at least zero (--rtol, --atol)."""
    if value is None:
        return None
    if not math.isfinite(value) or value < 0 or (value == 0 and param.name == "eps"):
        raise click.BadParameter(f"{value!r}: expected a finite number "
                                 f"{'above' if param.name == 'eps' else 'at least'} 0")
    return value


@click.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--loss", "losses", multiple=True, help="Only these losses (repeatable).")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table",
              show_default=True, help="How to print the report.")
@with_options(common_model_options)
@click.option("--save-grads", type=click.Path(dir_okay=False), help="Write LOSS/PARAM gradients (.npz).")
@click.option("--no-counterfactual", is_flag=True, help="Skip the extra backward passes through stops.")
@click.option("--expand", is_flag=True, help="One row per parameter, even for repeated instances (table).")
@click.option("--problems", is_flag=True, help="Only the parameters with a pair not as intended (table).")
@with_options(group_flags)
@click.pass_context
@fail_on_model_error
def analyze(ctx, model, losses, fmt, dims, seed, dtype, structural, max_memory, weights, save_grads,
            no_counterfactual, expand, problems):
    """Report, for every parameter and loss, whether gradient flows and if not, why."""
    from gradflow.cli import run
    if save_grads:   # a target that cannot be written fails now, not after the analysis
        run.check_save_target(save_grads, {"the model": model, "the --weights archive": weights},
                              structural)
    report, built = run.analyze_file(model, losses=losses, dims=dims, seed=seed, dtype=dtype,
                                     structural=structural, max_memory=max_memory, weights=weights,
                                     counterfactual=not no_counterfactual)
    run.print_warnings(built.warnings)
    if save_grads:
        run.save_grads(report, save_grads)
    run.render_report(report, fmt, ctx.obj["no_color"], expand=expand, problems=problems)
    sys.exit(Exit.OK)


@click.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.argument("param")
@click.option("--loss", "losses", multiple=True, help="Only these losses (repeatable).")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True,
              help="Distinct paths shown per loss.")
@with_options(common_model_options)
@with_options(group_flags)
@click.pass_context
@fail_on_model_error
def why(ctx, model, param, losses, limit, dims, seed, dtype, structural, max_memory, weights):
    """Every path from PARAM to each loss, with the cuts on it marked."""
    from gradflow.cli import run
    from gradflow.cli.render import why as render_why
    frozen, results = run.why(model, param, losses=losses, limit=limit, dims=dims, seed=seed, dtype=dtype,
                              structural=structural, max_memory=max_memory, weights=weights)
    render_why.render(param, results, ctx.obj["no_color"], model, frozen)


@click.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["tree", "dot", "mermaid"]), default="tree",
              show_default=True, help="Text, Graphviz or Mermaid.")
@click.option("--loss", "losses", multiple=True, help="Only what reaches these losses (repeatable).")
@dim_option
@with_options(group_flags)
@click.pass_context
@fail_on_model_error
def graph(ctx, model, fmt, losses, dims):
    """The model's entries and dependencies; cut edges dashed and labelled."""
    from gradflow.cli import run
    from gradflow.cli.render import graph as render_graph
    entries, edges, kinds, roots = run.entry_graph(model, losses=losses, dims=dims)
    render_graph.render(fmt, entries, edges, kinds, roots, ctx.obj["no_color"], model)


@click.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--eps", type=float, default=1e-6, show_default=True, callback=positive_float,
              help="Finite-difference step.")
@click.option("--rtol", type=float, default=1e-4, show_default=True, callback=positive_float,
              help="Relative tolerance: an error within RTOL of the larger of the two passes.")
@click.option("--atol", type=float, default=1e-7, show_default=True, callback=positive_float,
              help="Absolute tolerance added to it: below ATOL, differences are finite-difference noise.")
@click.option("--samples", type=click.IntRange(1), default=8, show_default=True,
              help="Entries nudged per parameter (all of them for smaller ones).")
@dim_option
@seed_option
@with_options(group_flags)
@click.pass_context
@fail_on_model_error
def gradcheck(ctx, model, eps, rtol, atol, samples, dims, seed):
    """Compare the tape's gradients with central finite differences (exit 1 on a mismatch)."""
    import gradflow
    from gradflow.analysis.gradcheck import gradcheck as check_gradients
    from gradflow.cli.render import gradcheck as render_gradcheck
    from gradflow.cli.run import start_work
    start_work()
    checks = check_gradients(gradflow.load(model, dims=dims or None, seed=seed), eps=eps, rtol=rtol, atol=atol,
                             samples=samples)
    render_gradcheck.render(checks, ctx.obj["no_color"])
    sys.exit(Exit.OK if render_gradcheck.passed(checks) else Exit.FAILED)


@click.group("import")
def import_():
    """Write a model file from another framework's model (runs that model's code)."""


@import_.command("torch")
@click.argument("target", metavar="FILE.py:FUNC")
@with_options(group_flags)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the model file here (default: stdout).")
@click.option("--weights-out", type=click.Path(dir_okay=False),
              help="Write parameter values and example inputs here (default with -o: OUTPUT's .npz).")
@click.pass_context
@fail_on_model_error
def import_torch(ctx, target, output, weights_out):
    """Import the PyTorch training step that FUNC in FILE.py returns (imports FILE.py, runs FUNC)."""
    from gradflow.cli import run
    run.import_torch(target, output, weights_out)


@click.command()
@with_options(group_flags)
@fail_on_model_error
def schema():
    """Print the JSON Schema of the model format (for editors)."""
    import json

    from gradflow.model.schema import SCHEMA
    click.echo(json.dumps(SCHEMA, indent=2))


@click.command()
@with_options(group_flags)
@click.pass_context
@fail_on_model_error
def ops(ctx):
    """Print the op table: every op, its inputs, arguments and gradient."""
    from gradflow.cli.render import ops as render_ops
    render_ops.render(run_console(ctx.obj["no_color"]))


def run_console(no_color: bool, stderr: bool = False):
    from gradflow.cli.render.console import console
    return console(no_color, stderr)


COMMANDS = (analyze, why, graph, gradcheck, import_, schema, ops)
