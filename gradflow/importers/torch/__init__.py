"""The PyTorch importer: ``FILE.py:FUNC`` -> an ``Imported`` model document.

The only package in gradflow that imports torch; loaded on demand, never at start-up.
"""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager, redirect_stderr, redirect_stdout

import torch

from gradflow.errors import ModelError
from gradflow.importers.document import Imported
from gradflow.importers.torch.backward import check_backward
from gradflow.importers.torch.capture import export
from gradflow.importers.torch.fxgraph import writes
from gradflow.importers.torch.places import display, is_torch_frame, no_hard_exit
from gradflow.importers.torch.target import load_step, own_argv
from gradflow.importers.torch.translate import Translator

STATUSES = ("flows", "zero", "blocked", "unreachable")


def capture_target(file: str, func: str) -> Imported:
    """Run FUNC from FILE, export its module in float64 and translate the graph.

    What the user's code prints goes to stderr: stdout may be carrying a JSON report. torch's
    own log lines (a failed shape check logs its traceback before raising) and prints (a trace
    that fails on a data-dependent size prints its partial graph, twice) are not shown: the
    error they lead to is one located line."""
    stderr = UsersOnly(sys.stderr)
    with redirect_stdout(stderr), redirect_stderr(stderr), no_logging(), no_hard_exit():
        return capture(file, func)


class UsersOnly:
    """A stream that passes on what the user's code writes and drops what torch's own code does."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        if is_torch_frame(sys._getframe(1)):   # print() is C: the frame that called it
            return len(text)
        return self.stream.write(text)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


@contextmanager
def no_logging():
    before = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(before)


def capture(file: str, func: str) -> Imported:
    step = load_step(file, func)
    check_globs(step)
    with float64(), own_argv(file):   # forward sees the argv FUNC saw
        module = step.module.double()
        inputs = tuple(t.double() if t.dtype.is_floating_point else t for t in step.inputs)
        step.module, step.inputs = module, inputs
        program, recorder = export(module, inputs, step.source)
        imported = Imported(func, step.description, step.source)
        Translator(program, step, recorder, imported).run()
        if writes_in_place(program):   # torch may refuse its backward, where the graph reads old values
            check_backward(module, inputs, step.source)
    imported.expect = {loss: {status: list(globs) for status, globs in statuses.items()}
                       for loss, statuses in step.expect.items()}
    return imported


@contextmanager
def float64():
    """Tensors the step creates (constants, masks) are float64 like its parameters."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def check_globs(step) -> None:
    """wrt and expect are checked here, so a mistake points at FUNC's def line."""
    at = step.source
    for loss, statuses in step.expect.items():
        for status, globs in statuses.items():
            if status not in STATUSES:
                raise ModelError(f"expect for {loss!r}: unknown status {status!r} (the statuses are "
                                 f"{', '.join(STATUSES)})", display(at.path), at.line, at.col)
            if not isinstance(globs, (list, tuple)) or not all(isinstance(g, str) for g in globs):
                raise ModelError(f"expect for {loss!r}: {status} must be a list of parameter globs",
                                 display(at.path), at.line, at.col)
    for loss, globs in step.wrt.items():
        if not all(isinstance(g, str) for g in globs):
            raise ModelError(f"wrt for {loss!r} must be a list of parameter globs",
                             display(at.path), at.line, at.col)


def writes_in_place(program) -> bool:
    """Does the exported step write into a tensor in place, in its graph or a grad-mode block's?"""
    return any(writes(node) for graph_module in program.graph_module.modules()
               if isinstance(graph_module, torch.fx.GraphModule) for node in graph_module.graph.nodes)
