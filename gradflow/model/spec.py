"""The validated model description: plain dataclasses, every piece with its place.

``load.py`` turns YAML into these; ``build.py`` turns these into a tape. Nothing
here computes anything.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

STATUSES = ("flows", "zero", "blocked", "unreachable")

# These records are read, never printed or compared: without eq and repr, each class
# costs start-up one generated method (compiled at import, about 0.1 ms each) instead of
# three. Place keeps both, and a hash as it had when it was frozen: places are compared,
# shown, and may be kept in sets. The same holds for the other internal records (Node,
# NodeInfo, Op, DimExpr, LossFlow, Context, the CLI's Result).


@dataclass(unsafe_hash=True)   # not frozen: a frozen dataclass is slower to make, one per line
class Place:
    """1-based line and column in the model file, or, with ``file``, in another source file
    (the Python code an imported model came from)."""
    line: int
    col: int
    file: str | None = None


@dataclass(eq=False, repr=False)
class Init:
    """How a tensor is initialised: a kind and its (number or dim-name) arguments."""
    kind: str                      # normal | uniform | glorot | he | zeros | ones | constant | randint | value
    args: tuple = ()
    value: object = None           # the nested list of `value:`
    place: Place | None = None


@dataclass(eq=False, repr=False)
class TensorSpec:
    """An input or a parameter."""
    name: str
    shape: tuple                   # ints and dim names
    dtype: str                     # "float" | "int"
    init: Init | None
    place: Place
    shape_place: Place | None = None
    frozen: bool = False           # never trained (requires_grad=False); still analysed
    source: Place | None = None    # where the code that declared it stands, when not here


@dataclass(eq=False, repr=False)
class Entry:
    """One line of a graph: ``targets: expression``."""
    key: str
    targets: tuple[str, ...]
    tree: ast.expr | None          # None for a bare number
    number: float | None
    place: Place                   # where the key stands
    origin: Place                  # where the expression text starts (column of its first character)
    source: Place | None = None    # the code that made it (an imported model's .py line), if given


@dataclass(eq=False, repr=False)
class ModuleSpec:
    """A module of the file: its inputs, dims, params, graph and outputs."""
    name: str
    inputs: tuple[str, ...]
    dims: dict                      # name -> (int, Place)
    params: dict                    # local name -> TensorSpec
    graph: list                     # [Entry]
    outputs: tuple[str, ...]
    multi: bool                     # declared with `outputs:` (returns a tuple)
    place: Place


@dataclass(eq=False, repr=False)
class InstanceSpec:
    """An instance of a module, declared under ``instances:``, with the dims it sets."""
    name: str
    module: str
    dims: dict                      # name -> (int, Place)
    place: Place


@dataclass(eq=False, repr=False)
class LossSpec:
    """A loss of ``losses:`` and the parameters it is declared to train (``wrt``)."""
    name: str
    wrt: list | None                # [(glob, Place)] or None when not declared
    place: Place
    source: Place | None = None


@dataclass(eq=False, repr=False)
class ModelSpec:
    """A checked model file, before anything is built from it."""
    path: str
    name: str
    description: str
    seed: int
    dims: dict                      # name -> (int, Place)
    inputs: dict                    # name -> TensorSpec
    params: dict                    # name -> TensorSpec
    modules: dict                   # name -> ModuleSpec
    instances: dict                 # name -> InstanceSpec
    graph: list                     # [Entry]
    losses: dict                    # name -> LossSpec
    expect: dict                    # loss -> {status: [(glob, Place)]}
    check: dict = field(default_factory=dict)   # rule settings from the file's `check:` block
    check_places: dict = field(default_factory=dict)  # each of its keys -> Place
    expect_places: dict = field(default_factory=dict)  # loss -> Place of its expect key
    dims_place: Place | None = None  # the `dims:` key, where a wrong --dim NAME points
    source: Place | None = None     # top-level `source:`: the place of whatever has none of its own
    step: bool = False              # made from a Python training step: its user wrote no YAML
