"""Errors with a place: every problem in a model file points at FILE:LINE:COL.

A leaf module: anyone may import it, it imports nothing of gradflow.
"""

from __future__ import annotations


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

    def located(self, path: str | None = None, line: int | None = None,
                col: int | None = None) -> "ModelError":
        """Fill in whatever part of the place is still unknown; returns self."""
        self.path = self.path or path
        self.line = self.line or line
        self.col = self.col or col
        return self

    def __str__(self) -> str:
        return f"{self.path or '<model>'}:{self.line or 1}:{self.col or 1}: error: {self.message}"


class ModelErrors(ModelError):
    """Several errors of one file, sorted by position; str() gives one line each."""

    def __init__(self, errors: list[ModelError]):
        errors = sorted(errors, key=lambda e: (e.line or 0, e.col or 0))
        first = errors[0]
        super().__init__(first.message, first.path, first.line, first.col)
        self.errors = errors

    def __str__(self) -> str:
        return "\n".join(ModelError.__str__(e) for e in self.errors)
