"""``FILE.py:FUNC``: run the user's file and function, check what FUNC returns.

Running a ``.py`` target runs the user's code, as pytest does with a test file.
The file's folder goes first on ``sys.path`` while it is imported, as
``python FILE.py`` would, so its sibling modules import, and ``sys.argv`` is ``[FILE.py]``.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from gradflow.errors import ModelError, did_you_mean
from gradflow.importers.document import Source
from gradflow.importers.torch.places import display, exit_call, raised, users_failure

KEYS = ("module", "inputs", "wrt", "expect", "description")


@dataclass
class Step:
    """What FUNC returned, checked."""
    module: torch.nn.Module
    inputs: tuple
    wrt: dict
    expect: dict
    description: str
    source: Source                   # FUNC's def line


def load_step(file: str, func: str) -> Step:
    path = Path(file)
    if not path.is_file():
        raise ModelError("no such Python file", file, 1, 1)
    with first_on_path(str(path.resolve().parent)), own_argv(file):   # FUNC may import siblings lazily too
        module = run_file(path)
        return call_step(module, func, path, file)


def call_step(module, func: str, path: Path, file: str) -> Step:
    fn = getattr(module, func, None)
    if not callable(fn):
        names = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_"))
        known = f" (it defines {', '.join(names)})" if names else ""
        if fn is None:
            raise ModelError(f"{file} has no function {func!r}{known}", file, 1, 1)
        raise ModelError(f"{file}: {func!r} is not a function but a value of type {type(fn).__name__}"
                         f"{known}", file, 1, 1)
    source = def_source(fn, path)
    try:
        inspect.signature(fn).bind()
    except TypeError:   # gradflow calls it with nothing: say so, not Python's missing-argument error
        raise ModelError(f"{func}() must take no arguments: gradflow calls it as {func}() and uses "
                         "the step it returns (give defaults, or wrap it)", display(source.path),
                         source.line, source.col) from None
    except ValueError:  # no signature to read (a builtin): calling it will tell
        pass
    # A sys.exit is not the end of gradflow, nor of the other files being checked.
    with users_failure(lambda e: f"{func}() {exit_call(e) if isinstance(e, SystemExit) else raised(e)}", source):
        returned = fn()
    return check_returned(returned, func, source)


@contextmanager
def first_on_path(folder: str):
    """``folder`` first on sys.path, as ``python FILE.py`` has it, while the step is built."""
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        if folder in sys.path:
            sys.path.remove(folder)


@contextmanager
def own_argv(file: str):
    """sys.argv as ``python FILE.py`` has it, not gradflow's: a script's argparse at import
    then sees no arguments rather than ``check FILE.py:FUNC``."""
    argv, sys.argv = sys.argv, [file]
    try:
        yield
    finally:
        sys.argv = argv


def run_file(path: Path):
    """Import ``path`` as a fresh module."""
    name = f"gradflow_step_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    def message(e) -> str:
        if isinstance(e, SystemExit):   # a script's argparse or sys.exit at import
            return f"importing {path} {exit_call(e)} (is the training run behind `if __name__ == '__main__':`?)"
        return f"importing {path} {raised(e)}"
    with users_failure(message, Source(str(path.resolve()), 1, 1)):
        try:
            spec.loader.exec_module(module)
        except SyntaxError as e:
            raise ModelError(f"syntax error: {e.msg}", display(os.path.abspath(e.filename or path)),
                             e.lineno or 1, e.offset or 1) from None
    return module


def def_source(fn, path: Path) -> Source:
    try:
        line = inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        line = 1
    code = getattr(fn, "__code__", None)
    file = code.co_filename if code is not None else str(path)
    return Source(os.path.abspath(file), line, 1)


def check_returned(value, func: str, source: Source) -> Step:
    def fail(message):
        return ModelError(f"{func}() {message}", display(source.path), source.line, source.col)
    if not isinstance(value, dict):
        if inspect.iscoroutine(value):   # never awaited: Python would warn so at exit
            value.close()
        raise fail(f"must return a dict with 'module' and 'inputs', not {type(value).__name__}")
    unknown = [k for k in value if k not in KEYS]
    if unknown:
        close = did_you_mean(str(unknown[0]), KEYS)
        raise fail(f"returned an unknown key {unknown[0]!r}{close or ' (the keys are ' + ', '.join(KEYS) + ')'}")
    for key in ("module", "inputs"):
        if key not in value:
            raise fail(f"must return {key!r}")
    module, inputs = value["module"], value["inputs"]
    if not isinstance(module, torch.nn.Module):
        raise fail(f"returned a 'module' that is not a torch.nn.Module but {type(module).__name__}")
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else inputs
    if isinstance(inputs, dict):
        raise fail("returned 'inputs' as a dict: gradflow calls module(*inputs), so return the tensors as a "
                   "tuple in the order forward takes them")
    if not isinstance(inputs, (tuple, list)) or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise fail("returned 'inputs' that are not a tuple of tensors")
    for name, t in [*module.named_parameters(), *module.named_buffers()]:
        if t.is_complex() or t.layout != torch.strided:
            raise fail(f"returned a module whose {name!r} is {'complex' if t.is_complex() else 'sparse'}: "
                       "gradflow's values are real and dense")
        if t.is_meta:   # a shape without values (torch.func ensembling's copy.deepcopy(model).to('meta'))
            raise fail(f"returned a module whose {name!r} is on the meta device, which holds no values: move it "
                       "to the CPU (module.to_empty(device='cpu'), then initialise it) or out of the module")
    for i, t in enumerate(inputs):
        if t.is_meta:
            raise fail(f"returned input {i} on the meta device, which holds no values: pass a CPU tensor")
        if t.layout != torch.strided:
            raise fail(f"returned input {i} with layout {str(t.layout).replace('torch.', '')}: only dense tensors "
                       "can be imported (pass t.to_dense())")
        if t.is_complex():
            raise fail(f"returned input {i} of dtype {str(t.dtype).replace('torch.', '')}: gradflow's values are "
                       "real (pass the real and imaginary parts as two real tensors)")
    wrt, expect = value.get("wrt") or {}, value.get("expect") or {}
    if not isinstance(wrt, dict) or not all(isinstance(v, (list, tuple)) for v in wrt.values()):
        raise fail("returned a 'wrt' that is not a dict of loss -> list of parameter globs")
    if not isinstance(expect, dict) or not all(isinstance(v, dict) for v in expect.values()):
        raise fail("returned an 'expect' that is not a dict of loss -> {status: [globs]}")
    description = value.get("description") or ""
    if not isinstance(description, str):
        raise fail("returned a 'description' that is not a string")
    return Step(module, tuple(inputs), wrt, expect, description, source)
