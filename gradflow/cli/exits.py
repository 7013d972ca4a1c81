"""The exit codes of every command, in one IntEnum.

A module of its own so that the modules behind the commands need not import
``main``: run as ``python -m gradflow.cli.main``, that module would be executed twice.
"""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0        # success; warnings allowed unless --strict
    FAILED = 1    # a check or gradcheck failed
    INVALID = 2   # usage error or invalid model (one FILE:LINE:COL: error: line on stderr)
    PIPE = 141    # stdout was closed early (as a process killed by SIGPIPE reports)
    INTERRUPTED = 130   # Ctrl-C (as a process killed by SIGINT reports)
