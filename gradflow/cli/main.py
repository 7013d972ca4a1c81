"""The command line: parse flags -> library call -> renderer -> exit code.

Nothing here analyses anything; every command is a few lines around the API.
JSON goes to stdout alone; messages, warnings and progress go to stderr. The group
and `check` live here, the other commands in commands.py.
"""

from __future__ import annotations

import sys

import click

from gradflow import __version__
from gradflow.cli.options import (common_model_options, fail_on_model_error, group_flags, group_options,
                                  parse_rule_ids, with_options)

EXIT_CODES = ("Exit codes: 0 success (warnings allowed unless --strict); 1 a check or gradcheck "
              "failed; 2 usage error, invalid model or no model found; 130 interrupted.")


class Commands(click.Group):
    """gradflow's commands: check is defined here, the others (commands.py) are added when a
    name other than check is given (one of them, or a typo that click's did-you-mean compares
    with them all), or when --help lists them. CI runs check, and making the others' options
    (click makes objects and asks gettext for each) cost its every start-up a millisecond."""

    def get_command(self, ctx, name):
        if name not in self.commands:
            self.add_the_rest()
        return super().get_command(ctx, name)

    def list_commands(self, ctx) -> list:
        self.add_the_rest()
        return sorted(self.commands)

    def add_the_rest(self) -> None:
        from gradflow.cli.commands import COMMANDS
        for command in COMMANDS:
            self.add_command(command)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES)
@click.version_option(__version__, "--version", prog_name="gradflow")
@with_options(group_options)
@click.pass_context
def cli(ctx, no_color, debug):
    """Which parameters does each loss train, and if not, why not."""
    ctx.obj = {"no_color": no_color}


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--format", "fmt", default="text", show_default=True,
              type=click.Choice(["text", "json", "github", "junit", "markdown", "sarif"]),
              help="How to print the findings (github: workflow annotations).")
@click.option("--select", default="", metavar="ID,..", callback=parse_rule_ids,
              help="Turn rules on (overrides an ignore in pyproject.toml or the model's check:).")
@click.option("--ignore", default="", metavar="ID,..", callback=parse_rule_ids, help="Turn rules off.")
@click.option("--strict", is_flag=True, default=None, help="Warnings fail too.")
@click.option("-j", "--jobs", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Check files in parallel.")
@with_options(common_model_options)
@with_options(group_flags)
@click.pass_context
@fail_on_model_error
def check(ctx, paths, fmt, select, ignore, strict, jobs, dims, seed, dtype, structural, max_memory, weights):
    """Check the expectations and rules of model files (exit 1 when one fails)."""
    from gradflow.cli import run
    from gradflow.cli.render import SHOW_COUNTERFACTUALS
    overrides = run.cli_settings(select=select, ignore=ignore, strict=strict, max_memory=max_memory)
    run.check_flags(overrides, ctx)
    if weights:   # an archive no model can read is one error, not one per model
        from gradflow.model.weights import check_archive
        check_archive(weights)
    files = run.find_models(paths)
    results = run.check_files(files, overrides, dims=dims, seed=seed, dtype=dtype, structural=structural,
                              weights=weights, counterfactual=fmt in SHOW_COUNTERFACTUALS, jobs=jobs,
                              debug=ctx.find_root().params["debug"], no_color=ctx.obj["no_color"])
    run.render_check(results, fmt, ctx.obj["no_color"])
    sys.exit(run.check_exit_code(results))


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
    from gradflow.cli.endings import (Interrupted, catch_interrupts, stop_closed_stdout, stop_interrupted,
                                      stop_unwritable)
    catch_interrupts()
    if getattr(sys.stdout, "errors", None) == "strict" and hasattr(sys.stdout, "reconfigure"):
        # A name the output's encoding cannot spell (an ASCII-only locale, PYTHONIOENCODING)
        # is written escaped, as stderr writes it, rather than ending the command.
        sys.stdout.reconfigure(errors="backslashreplace")
    stdout = sys.stdout
    try:
        cli(prog_name="gradflow")
    except Interrupted:   # before or after a command ran (inside one, its wrapper says it)
        stop_interrupted()
    except OSError as e:   # click's own output (--help, --version) could not be written
        stop_unwritable(e)
    except SystemExit as done:
        # click ends with 1 when the reader of its own output (--help, --version) has gone,
        # after swapping stdout for a wrapper that keeps the final flush quiet; every command
        # ends with 141 then.
        if done.code == 1 and sys.stdout is not stdout:
            stop_closed_stdout()
        raise


if __name__ == "__main__":
    main()
