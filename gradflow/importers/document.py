"""An imported model as plain data, and its model file (format 1) with source places.

The torch importer fills an ``Imported``; ``to_yaml`` writes it as a model file
whose every entry keeps the place of the Python code that made it, so a
committed file still points at the user's ``.py`` lines. Nothing here imports torch.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

# Constant tensors (arange, masks, buffers) up to this many entries are written
# inline with `value:`; larger ones, and those holding an infinity or NaN (a model
# file's numbers are finite: an attention mask of -inf), live only in the weights archive.
INLINE_VALUES = 4096


@dataclass(frozen=True)
class Source:
    """A place in a Python file: absolute path, 1-based line and column."""
    path: str
    line: int
    col: int

    def text(self, base: str | None) -> str:
        path = self.path if base is None else relative(self.path, base)
        return f"{path}:{self.line}:{self.col}"


@dataclass
class Tensor:
    """A parameter, an input or a constant: name, shape, dtype and where it was declared."""
    name: str
    shape: tuple
    dtype: str = "float"             # "float" | "int"
    frozen: bool = False
    source: Source | None = None
    value: object = None             # a numpy array for constants written inline


@dataclass
class Line:
    """One graph entry: targets, expression text and its Python place."""
    targets: tuple
    expr: str
    source: Source | None


@dataclass
class Imported:
    """Everything a model file needs, plus the real arrays (parameters, inputs, constants)."""
    name: str
    description: str
    source: Source                   # the FUNC's def line: place of params, wrt, expect
    inputs: list = field(default_factory=list)     # [Tensor], forward's arguments then constants
    params: list = field(default_factory=list)     # [Tensor] in named_parameters() order
    graph: list = field(default_factory=list)      # [Line]
    losses: dict = field(default_factory=dict)     # loss -> [glob] or None
    loss_sources: dict = field(default_factory=dict)   # loss -> Source of the code computing it
    expect: dict = field(default_factory=dict)     # loss -> {status: [glob]}
    arrays: dict = field(default_factory=dict)     # name -> numpy array

    def to_yaml(self, base: str | None = None) -> str:
        """The model file; source paths relative to ``base`` (the file's folder), or absolute."""
        out = ["gradflow: 1", f"name: {quote(self.name)}"]
        if self.description:
            out.append(f"description: {quote(self.description)}")
        out.append(f"source: {quote(self.source.text(base))}")
        for section, tensors in (("inputs", self.inputs), ("params", self.params)):
            if tensors:
                out.append(f"{section}:")
                out += [f"  {t.name}: {tensor_fields(t, base)}" for t in tensors]
        out.append("graph:")
        for line in self.graph:
            fields = [f"expr: {quote(line.expr)}"]
            if line.source is not None:
                fields.append(f"source: {quote(line.source.text(base))}")
            out.append(f"  {', '.join(line.targets)}: {{{', '.join(fields)}}}")
        out.append("losses:")
        for loss, wrt in self.losses.items():
            fields = [f"wrt: {json.dumps(list(wrt))}"] if wrt is not None else []
            if loss in self.loss_sources:
                fields.append(f"source: {quote(self.loss_sources[loss].text(base))}")
            out.append(f"  {loss}: {{{', '.join(fields)}}}")
        if self.expect:
            out.append("expect:")
            for loss, statuses in self.expect.items():
                out.append(f"  {loss}:")
                out += [f"    {status}: {json.dumps(list(globs))}" for status, globs in statuses.items()]
        return "\n".join(out) + "\n"


def tensor_fields(t: Tensor, base: str | None) -> str:
    fields = [f"shape: {json.dumps(list(t.shape))}"]
    if t.dtype != "float":
        fields.append(f"dtype: {t.dtype}")
    if t.frozen:
        fields.append("frozen: true")
    if t.value is not None and t.value.size <= INLINE_VALUES and all(math.isfinite(v) for v in t.value.flat):
        fields.append(f"value: {flow_list(t.value.tolist())}")
    if t.source is not None:
        fields.append(f"source: {quote(t.source.text(base))}")
    return "{" + ", ".join(fields) + "}"


def flow_list(value) -> str:
    """A nested list of finite numbers in YAML flow style."""
    if isinstance(value, list):
        return "[" + ", ".join(flow_list(v) for v in value) + "]"
    text = repr(value)
    # YAML 1.1 reads 1e+300 as a string: its floats need a dot before the exponent
    return text.replace("e", ".0e", 1) if "e" in text and "." not in text else text


def quote(text: str) -> str:
    """A YAML double-quoted scalar (JSON's escapes are YAML's)."""
    return json.dumps(text)


def relative(path: str, base: str) -> str:
    """``path`` relative to ``base`` when both are inside the working directory (a project
    committing its imported models), else absolute."""
    cwd = os.getcwd()
    try:
        inside = os.path.commonpath([os.path.abspath(path), os.path.abspath(base), cwd]) == cwd
    except ValueError:   # another drive on Windows
        return path
    return os.path.relpath(path, base) if inside else path
