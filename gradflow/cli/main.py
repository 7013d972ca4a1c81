"""The command line: parse flags -> library call -> renderer -> exit code.

Nothing here analyses anything; every command is a few lines around the API.
JSON goes to stdout alone; messages, warnings and progress go to stderr.
"""

from __future__ import annotations

import math
import re
import sys

import click

from gradflow import __version__
from gradflow.cli.exits import Exit

# Patterns used through re.match are compiled on first use, not at every start-up.
DIM = r"\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(-?[0-9]{1,18})\s*\Z"


def parse_dims(ctx, param, values) -> dict:
    """--dim NAME=INT, repeatable: ASCII digits only, a positive size (no '²', no 5,000 digits)."""
    dims = {}
    for item in values:
        match = re.match(DIM, item, re.ASCII)
        if match is None:    # a size below 1 is refused by the model, at the dim it overrides
            raise click.BadParameter(f"{item!r}: expected NAME=INTEGER, e.g. --dim batch=4")
        dims[match[1]] = int(match[2])
    return dims


def parse_bytes(ctx, param, value):
    """--max-memory: bytes, or a size such as 512MiB or 2GB; never NaN, infinite or negative."""
    if value is None:
        return None
    from gradflow.analysis.settings import SettingsError, size
    try:
        return size(value, "SIZE")
    except SettingsError as e:
        raise click.BadParameter(e.message) from None


def parse_rule_ids(ctx, param, value) -> str:
    """--select/--ignore ID,..: known rule ids only (with a did-you-mean)."""
    from gradflow.analysis.settings import SettingsError, rule_ids
    try:
        return ",".join(rule_ids(value, param.name))
    except SettingsError as e:
        raise click.BadParameter(e.message) from None


def positive_float(ctx, param, value):
    """A finite number above zero (--eps) or at least zero (--rtol)."""
    if value is None:
        return None
    if not math.isfinite(value) or value < 0 or (value == 0 and param.name == "eps"):
        raise click.BadParameter(f"{value!r}: expected a finite number "
                                 f"{'above' if param.name == 'eps' else 'at least'} 0")
    return value


def fail_on_model_error(func):
    """Run a command; an invalid model ends it with one located error line and exit 2."""
    from functools import wraps

    @wraps(func)
    def wrapper(*args, **kwargs):
        from gradflow.cli.endings import Interrupted, stop_closed_stdout, stop_interrupted, stop_unwritable
        from gradflow.cli.escape import shown
        from gradflow.errors import ModelError
        debug = click.get_current_context().find_root().params.get("debug")
        try:
            return func(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except (KeyboardInterrupt, Interrupted):
            stop_interrupted()
        except BrokenPipeError:
            stop_closed_stdout()
        except (ModelError, OSError) as e:   # OSError: reading is checked where it happens, this is writing
            if debug:
                import traceback
                traceback.print_exc()
            if not isinstance(e, ModelError):
                stop_unwritable(e)
            click.echo(shown(e), err=True)
            sys.exit(Exit.INVALID)
        except Exception as e:   # a bug in gradflow: say so in one line unless debugging
            if debug:
                raise
            click.echo(shown(f"gradflow: internal error: {type(e).__name__}: {e} (rerun with --debug)"),
                       err=True)
            sys.exit(Exit.INVALID)
    return wrapper


common_model_options = [
    click.option("--dim", "dims", multiple=True, callback=parse_dims, metavar="NAME=INT",
                 help="Override a dim of the model file."),
    click.option("--seed", type=click.IntRange(0, 2 ** 63 - 1), default=None,
                 help="Seed for initial values (default: the file's)."),
    click.option("--dtype", type=click.Choice(["float64", "float32"]), default="float64", show_default=True),
    click.option("--structural", is_flag=True, help="Shapes and reachability only: no arrays, no numbers."),
    click.option("--max-memory", callback=parse_bytes, default=None, metavar="SIZE",
                 help="Refuse numeric runs estimated above SIZE (default 2GiB)."),
]


def with_options(options):
    def decorate(func):
        for option in reversed(options):
            func = option(func)
        return func
    return decorate


EXIT_CODES = ("Exit codes: 0 success (warnings allowed unless --strict); 1 a check or gradcheck "
              "failed; 2 usage error, invalid model or no model found; 130 interrupted.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES)
@click.version_option(__version__, "--version", prog_name="gradflow")
@click.option("--no-color", is_flag=True, help="No colours, even on a terminal.")
@click.option("--debug", is_flag=True, help="Show Python tracebacks of errors.")
@click.pass_context
def cli(ctx, no_color, debug):
    """Which parameters does each loss train, and if not, why not."""
    ctx.obj = {"no_color": no_color}


@cli.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--loss", "losses", multiple=True, help="Only these losses (repeatable).")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table",
              show_default=True)
@with_options(common_model_options)
@click.option("--weights", type=click.Path(dir_okay=False), help="Values for parameters/inputs (.npz).")
@click.option("--save-grads", type=click.Path(dir_okay=False), help="Write LOSS/PARAM gradients (.npz).")
@click.option("--no-counterfactual", is_flag=True, help="Skip the extra backward passes through stops.")
@click.option("--expand", is_flag=True, help="One row per parameter, even for repeated instances (table).")
@click.option("--problems", is_flag=True, help="Only the parameters with a pair not as intended (table).")
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


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--format", "fmt", default="text", show_default=True,
              type=click.Choice(["text", "json", "github", "junit", "markdown", "sarif"]))
@click.option("--select", default="", metavar="ID,..", callback=parse_rule_ids,
              help="Turn rules on (overrides an ignore in pyproject.toml or the model's check:).")
@click.option("--ignore", default="", metavar="ID,..", callback=parse_rule_ids, help="Turn rules off.")
@click.option("--strict", is_flag=True, default=None, help="Warnings fail too.")
@click.option("-j", "--jobs", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Check files in parallel.")
@with_options(common_model_options)
@click.pass_context
@fail_on_model_error
def check(ctx, paths, fmt, select, ignore, strict, jobs, dims, seed, dtype, structural, max_memory):
    """Check the expectations and rules of model files (exit 1 when one fails)."""
    from gradflow.cli import run
    from gradflow.cli.render import SHOW_COUNTERFACTUALS
    overrides = run.cli_settings(select=select, ignore=ignore, strict=strict, max_memory=max_memory)
    files = run.find_models(paths)
    results = run.check_files(files, overrides, dims=dims, seed=seed, dtype=dtype, structural=structural,
                              counterfactual=fmt in SHOW_COUNTERFACTUALS, jobs=jobs,
                              debug=ctx.find_root().params["debug"])
    run.render_check(results, fmt, ctx.obj["no_color"])
    sys.exit(run.check_exit_code(results))


@cli.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.argument("param")
@click.option("--loss", "losses", multiple=True, help="Only these losses (repeatable).")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True,
              help="Distinct paths shown per loss.")
@with_options(common_model_options)
@click.pass_context
@fail_on_model_error
def why(ctx, model, param, losses, limit, dims, seed, dtype, structural, max_memory):
    """Every path from PARAM to each loss, with the cuts on it marked."""
    from gradflow.cli import run
    from gradflow.cli.render import why as render_why
    results = run.why(model, param, losses=losses, limit=limit, dims=dims, seed=seed, dtype=dtype,
                      structural=structural, max_memory=max_memory)
    render_why.render(param, results, ctx.obj["no_color"], model)


@cli.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["tree", "dot", "mermaid"]), default="tree",
              show_default=True)
@click.option("--loss", "losses", multiple=True, help="Only what reaches these losses (repeatable).")
@click.option("--dim", "dims", multiple=True, callback=parse_dims, metavar="NAME=INT")
@click.pass_context
@fail_on_model_error
def graph(ctx, model, fmt, losses, dims):
    """The model's entries and dependencies; cut edges dashed and labelled."""
    from gradflow.cli import run
    from gradflow.cli.render import graph as render_graph
    entries, edges, kinds, roots = run.entry_graph(model, losses=losses, dims=dims)
    render_graph.render(fmt, entries, edges, kinds, roots, ctx.obj["no_color"], model)


@cli.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--eps", type=float, default=1e-6, show_default=True, callback=positive_float,
              help="Finite-difference step.")
@click.option("--rtol", type=float, default=1e-4, show_default=True, callback=positive_float,
              help="Relative tolerance.")
@click.option("--samples", type=click.IntRange(1), default=8, show_default=True,
              help="Entries nudged per parameter (all of them for smaller ones).")
@click.option("--dim", "dims", multiple=True, callback=parse_dims, metavar="NAME=INT")
@click.option("--seed", type=click.IntRange(0, 2 ** 63 - 1), default=None)
@click.pass_context
@fail_on_model_error
def gradcheck(ctx, model, eps, rtol, samples, dims, seed):
    """Compare the tape's gradients with central finite differences (exit 1 on a mismatch)."""
    import gradflow
    from gradflow.analysis.gradcheck import gradcheck as check_gradients
    from gradflow.cli.render import gradcheck as render_gradcheck
    from gradflow.cli.run import start_work
    start_work()
    checks = check_gradients(gradflow.load(model, dims=dims or None, seed=seed), eps=eps, rtol=rtol,
                             samples=samples)
    render_gradcheck.render(checks, ctx.obj["no_color"])
    sys.exit(Exit.OK if render_gradcheck.passed(checks) else Exit.FAILED)


@cli.group("import")
def import_():
    """Write a model file from another framework's model (runs that model's code)."""


@import_.command("torch")
@click.argument("target", metavar="FILE.py:FUNC")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the model file here (default: stdout).")
@click.option("--weights-out", type=click.Path(dir_okay=False),
              help="Write parameter values and example inputs here (default with -o: OUTPUT's .npz).")
@click.pass_context
@fail_on_model_error
def import_torch(ctx, target, output, weights_out):
    """Import the PyTorch training step that FUNC in FILE.py returns (imports FILE.py, runs FUNC)."""
    from gradflow.cli import run
    run.import_torch(target, output, weights_out)


@cli.command()
@fail_on_model_error
def schema():
    """Print the JSON Schema of the model format (for editors)."""
    import json

    from gradflow.model.schema import SCHEMA
    click.echo(json.dumps(SCHEMA, indent=2))


@cli.command()
@click.pass_context
@fail_on_model_error
def ops(ctx):
    """Print the op table: every op, its inputs, arguments and gradient."""
    from gradflow.cli.render import ops as render_ops
    render_ops.render(run_console(ctx.obj["no_color"]))


def run_console(no_color: bool, stderr: bool = False):
    from gradflow.cli.render.console import console
    return console(no_color, stderr)


def main() -> None:
    """The `gradflow` command; it ends the process (see ``end_at_once``)."""
    from gradflow.cli import collector
    from gradflow.cli.endings import end_at_once
    collector.pause()   # until the command has loaded its libraries
    try:
        run_command()
    except SystemExit as done:
        end_at_once(done.code)
        raise


def run_command() -> None:
    from gradflow.cli.endings import Interrupted, catch_interrupts, stop_interrupted, stop_unwritable
    catch_interrupts()
    if getattr(sys.stdout, "errors", None) == "strict" and hasattr(sys.stdout, "reconfigure"):
        # A name the output's encoding cannot spell (an ASCII-only locale, PYTHONIOENCODING)
        # is written escaped, as stderr writes it, rather than ending the command.
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        cli(prog_name="gradflow")
    except Interrupted:   # before or after a command ran (inside one, its wrapper says it)
        stop_interrupted()
    except OSError as e:   # click's own output (--help, --version) could not be written
        stop_unwritable(e)


if __name__ == "__main__":
    main()
