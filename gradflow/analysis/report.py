"""The report: dataclasses for every (parameter, loss) pair, cut and finding, and
``to_dict()``, which is the JSON document of the specification (keys and list
orders stable, parameters in file order, so reports diff cleanly).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from functools import cached_property

import numpy as np

from gradflow.analysis.globs import glob_matches

FORMAT = 1
SEGMENT = re.compile(r"(?<=\.)[0-9]+(?=\.|$)")


def collapse(names: list) -> list:
    """Names of repeated instances that differ in one integer segment, contiguous and in
    order, as one: block.0.w, block.1.w, block.2.w -> block.{0..2}.w. Others unchanged."""
    out, runs = [], {}
    for name in names:
        found = list(SEGMENT.finditer(name))
        if not found:
            out.append(name)
            continue
        m = found[0]
        key = (name[:m.start()], name[m.end():])
        number = int(m.group())
        run = runs.get(key)
        if run is not None and run[1] + 1 == number and out[run[2]] is run:
            run[1] = number
            continue
        run = [number, number, len(out), key]
        runs[key] = run
        out.append(run)
    return [item if isinstance(item, str) else
            (f"{item[3][0]}{item[0]}{item[3][1]}" if item[0] == item[1] else
             f"{item[3][0]}{{{item[0]}..{item[1]}}}{item[3][1]}") for item in out]


def listing(names: list, most: int = 6, last: str = " and ") -> str:
    """'a', 'a and b', 'a, b and c' (``last`` joins the last two); past ``most`` names, 'a, b,
    ... and 7 more'. Repeated instances are collapsed first."""
    names = collapse(names)
    if len(names) > most:
        return ", ".join(names[:most - 1]) + f" and {len(names) - most + 1:,} more"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + last + names[-1]


@dataclass
class Pair:
    """What one loss sends into one parameter."""
    status: str                     # flows | zero | blocked | unreachable
    norm: float | None = None
    max_abs: float | None = None
    zero_fraction: float | None = None
    nonfinite: int | None = None
    cut_by: list = field(default_factory=list)            # [Cut]
    partially_cut_by: list = field(default_factory=list)  # [Cut]
    partly_told: list = field(default_factory=list)       # those worth a note: not inside a call (Graph.rejoined)
    dies_at: list = field(default_factory=list)           # [Cut-shaped places]
    counterfactual_norm: float | None = None

    def to_dict(self) -> dict:
        return {"status": self.status, "norm": self.norm, "max_abs": self.max_abs,
                "zero_fraction": self.zero_fraction, "nonfinite": self.nonfinite,
                "cut_by": [c.to_dict() for c in self.cut_by],
                "partially_cut_by": [c.to_dict() for c in self.partially_cut_by],
                "dies_at": [c.to_dict() for c in self.dies_at],
                "counterfactual_norm": self.counterfactual_norm}


@dataclass
class ParamReport:
    """One parameter of the report: its shape, place and a Pair for each loss."""
    name: str
    shape: tuple
    size: int
    line: int
    grads: dict                     # loss -> Pair
    frozen: bool = False

    def to_dict(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "size": self.size, "line": self.line,
                "frozen": self.frozen, "grads": {loss: pair.to_dict() for loss, pair in self.grads.items()}}


@dataclass
class StopReport:
    """One cut and, for each loss, the parameters it blocks or partly cuts."""
    cut: object                     # flow.Cut
    cuts: dict                      # loss -> {"blocks": [...], "partial": [...], "cut_norm": float|None}
    redundant: bool

    def to_dict(self) -> dict:
        return {**self.cut.to_dict(), "cuts": self.cuts, "redundant": self.redundant}


@dataclass
class LossReport:
    """One loss: its value, its line, and the wrt: and expect: globs it declares."""
    name: str
    value: float | None
    line: int
    wrt: list | None
    expect: dict = field(default_factory=dict)    # status -> [glob], from the model's expect:

    def to_dict(self) -> dict:
        return {"name": self.name, "value": self.value, "line": self.line, "wrt": self.wrt}

    def expected(self, param: str) -> str | None:
        """The status expect: asserts for ``param``, if any."""
        return next((status for status, globs in self.expect.items()
                     if any(glob_matches(param, g) for g in globs)), None)

    def meant_to_train(self, param: str) -> bool | None:
        """Whether ``param`` is in this loss's wrt (None: the loss declares no wrt)."""
        return None if self.wrt is None else any(glob_matches(param, g) for g in self.wrt)


@dataclass
class Finding:
    """What a rule found, at a place, and the loss, parameters or node it is about."""
    rule: str
    severity: str                   # error | warning
    message: str
    path: str
    line: int
    col: int
    loss: str | None = None
    param: str | None = None
    node: str | None = None
    file: str | None = None         # where line and col are: the model file, or an imported model's .py
    params: list = field(default_factory=list)   # every parameter this one cause affects
    command: str | None = None      # the `gradflow why` command that explains it

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(repr=False)
class Report:
    """Everything gradflow found out about one model."""
    model: dict                     # name, path, mode, seed, dims, nodes, params, param_count
    losses: list                    # [LossReport]
    params: list                    # [ParamReport], file order
    stops: list                     # [StopReport]
    findings: list = field(default_factory=list)   # [Finding]
    grads: dict = field(default_factory=dict)      # (loss, param) -> array, for flows/zero pairs
    version: str = ""
    settings: object = None                        # rules.Settings the findings were made with
    values: str = ""                               # where a numeric run's values came from: "seed 0"

    def __repr__(self) -> str:
        """One line, as a notebook shows it: not every pair and gradient."""
        return (f"<Report of {self.model['name']!r} ({self.model['mode']}): {len(self.params)} parameters, "
                f"{len(self.losses)} losses, {self.errors} errors, {self.warnings} warnings>")

    @cached_property
    def by_name(self) -> dict:
        return {p.name: p for p in self.params}

    def pair(self, param: str, loss: str) -> Pair:
        if param not in self.by_name:
            raise KeyError(f"no parameter {param!r}")
        grads = self.by_name[param].grads
        if loss not in grads:
            raise KeyError(f"no loss {loss!r}")
        return grads[loss]

    def status(self, param: str, loss: str) -> str:
        return self.pair(param, loss).status

    def intent(self, param: str, loss: str) -> str:
        """'ok', 'intended' (a block the model asks for) or 'problem', for display: what
        expect: asserts decides; else a block is intended for a frozen parameter, one outside
        the loss's wrt, or one another loss trains; flows outside a wrt, zero and a NaN or
        infinite gradient are problems."""
        pair, report = self.pair(param, loss), self.losses_by_name[loss]
        if pair.nonfinite:   # GF105's error, whatever expect: asserts of the status
            return "problem"
        expected = report.expected(param)
        if expected is not None:
            same = expected == pair.status or (self.model["mode"] == "structural"
                                               and {expected, pair.status} == {"flows", "zero"})
            return ("intended" if pair.status in ("blocked", "unreachable") else "ok") if same else "problem"
        inside = report.meant_to_train(param)
        if pair.status == "flows":
            return "problem" if inside is False and not self.by_name[param].frozen else "ok"
        if pair.status == "zero":
            return "problem"
        trained_elsewhere = any(p.status in ("flows", "zero") for p in self.by_name[param].grads.values())
        return "intended" if self.by_name[param].frozen or inside is False or trained_elsewhere else "problem"

    @cached_property
    def losses_by_name(self) -> dict:
        return {l.name: l for l in self.losses}

    def grad(self, param: str, loss: str) -> np.ndarray | None:
        """The gradient array (None in structural mode, or where no gradient reaches)."""
        self.pair(param, loss)
        return self.grads.get((loss, param))

    @property
    def errors(self) -> int:
        return sum(f.severity == "error" for f in self.findings)

    @property
    def warnings(self) -> int:
        return sum(f.severity == "warning" for f in self.findings)

    @property
    def failed(self) -> bool:
        """Whether `gradflow check` fails on this report: an error, or a warning under strict."""
        strict = self.settings is not None and self.settings.strict
        return self.errors > 0 or (strict and self.warnings > 0)

    def to_dict(self) -> dict:
        return {"format": FORMAT, "gradflow_version": self.version, "model": self.model,
                "losses": [l.to_dict() for l in self.losses],
                "params": [p.to_dict() for p in self.params],
                "stops": [s.to_dict() for s in self.stops],
                "findings": [f.to_dict() for f in self.findings],
                "summary": {"errors": self.errors, "warnings": self.warnings}}
