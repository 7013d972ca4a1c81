"""Errors with a place: every problem in a model file points at FILE:LINE:COL.

A leaf module: anyone may import it, it imports nothing of gradflow.
"""

from __future__ import annotations

from typing import NamedTuple


class ShapeError(ValueError):
    """An op was applied to operands of incompatible shapes or attributes.

    Raised by the engine without a location; the model builder catches it and
    re-raises a ModelError pointing at the expression that built the node.
    """


class ModelError(Exception):
    """A model file is invalid. Carries the place (1-based line and column)."""

    def __init__(self, message: str, path: str | None = None,
                 line: int | None = None, col: int | None = None):
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.col = col

    def __str__(self) -> str:
        return f"{self.path or '<model>'}:{self.line or 1}:{self.col or 1}: error: {self.message}"


class InputWarning(NamedTuple):
    """A warning about an input, outside the rules' findings (a --weights key that names
    nothing, a symbolic link loop): printed as a finding is, at a line when it has one."""
    path: str
    message: str
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        place = f"{self.path}:{self.line}:{self.col}" if self.line else self.path
        return f"{place}: warning: {self.message}"


def did_you_mean(word: str, candidates) -> str:
    """' (did you mean 'relu'?)' when a candidate is close to word, else ''."""
    candidates = list(candidates)
    folded = [c for c in candidates if c.lower() == word.lower()]   # 'W' for 'w': too short for difflib
    if folded:
        return f" (did you mean {folded[0]!r}?)"
    import difflib   # here: only a bad input needs it, and it takes a millisecond to load
    close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def static_text(value) -> str:
    """A constant as a message names it: what the user wrote is a list, not a Python tuple."""
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, (tuple, list)):
        return "a list"
    return repr(value)
