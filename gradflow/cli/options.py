"""What the commands share: the parsers of their flags, the options every model command
takes, and the wrapper that turns an invalid model into one located line and exit 2.
"""

from __future__ import annotations

import re
import sys

import click

from gradflow.cli.exits import Exit

# Patterns used through re.match are compiled on first use, not at every start-up.
DIM = r"\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(-?[0-9]+)\s*\Z"


def parse_dims(ctx, param, values) -> dict:
    """--dim NAME=INT, repeatable: ASCII digits only, a positive size (no '²', no 5,000 digits)."""
    dims = {}
    for item in values:
        match = re.match(DIM, item, re.ASCII)
        if match is None:    # a size below 1 is refused by the model, at the dim it overrides
            raise click.BadParameter(f"{item!r}: expected NAME=INT, e.g. --dim batch=4")
        digits = len(match[2].lstrip("-0"))
        if digits > 18:   # before int(): 5,000 digits would not convert (nor be worth echoing)
            raise click.BadParameter(f"{match[1]} has {digits:,} digits; a dim has at most 18")
        dims[match[1]] = int(match[2])
    return dims


def parse_bytes(ctx, param, value):
    """--max-memory: bytes, or a size such as 512MiB or 2GB; never NaN, infinite or negative."""
    if value is None:
        return None
    from gradflow.analysis.settings import SettingsError, size
    try:
        return size(value, "SIZE")
    except SettingsError as e:   # the option is named already: not "--ignore: ignore: ..."
        raise click.BadParameter(e.message.removeprefix(f"{param.name}: ")) from None


def parse_rule_ids(ctx, param, value) -> str:
    """--select/--ignore ID,..: known rule ids only (with a did-you-mean)."""
    from gradflow.analysis.settings import SettingsError, rule_ids
    try:
        return ",".join(rule_ids(value, param.name))
    except SettingsError as e:   # the option is named already: not "--ignore: ignore: ..."
        raise click.BadParameter(e.message.removeprefix(f"{param.name}: ")) from None


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


def set_group_flag(ctx, param, value) -> None:
    """A group flag given after the command, as if before it: in the group's ctx.obj (which
    each command's context shares) and its parameters, where each is read."""
    if value:
        ctx.obj[param.name] = ctx.find_root().params[param.name] = True


# The group's flags: before the command (the group's own), and after it too
# (`gradflow check models/ --no-color`), where each command's copy sets the group's value.
GROUP_FLAGS = {"--no-color": "No colours, even on a terminal.", "--debug": "Show Python tracebacks of errors."}
group_options = [click.option(flag, is_flag=True, help=text) for flag, text in GROUP_FLAGS.items()]
group_flags = [click.option(flag, is_flag=True, expose_value=False, callback=set_group_flag, help=text)
               for flag, text in GROUP_FLAGS.items()]

dim_option = click.option("--dim", "dims", multiple=True, callback=parse_dims, metavar="NAME=INT",
                          help="Override a dim of the model file.")
seed_option = click.option("--seed", type=click.IntRange(0, 2 ** 63 - 1), default=None, metavar="N",
                           help="Seed for initial values (default: the file's).")

common_model_options = [
    dim_option,
    seed_option,
    click.option("--dtype", type=click.Choice(["float64", "float32"]), default="float64", show_default=True,
                 help="Float type of the numeric run."),
    click.option("--structural", is_flag=True, help="Shapes and reachability only: no arrays, no numbers."),
    click.option("--max-memory", callback=parse_bytes, default=None, metavar="SIZE",
                 help="Refuse numeric runs estimated above SIZE (default 2GiB)."),
    click.option("--weights", type=click.Path(dir_okay=False), metavar="FILE",
                 help="Values for parameters/inputs (.npz)."),
]


def with_options(options):
    def decorate(func):
        for option in reversed(options):
            func = option(func)
        return func
    return decorate
