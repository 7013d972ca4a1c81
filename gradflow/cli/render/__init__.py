"""One module per output format; each has render_report(report, no_color) and/or
render_check(results, no_color). Imported on demand so JSON output never loads rich.
Also what `check`'s renderers share: which invalid models' errors are said."""

from __future__ import annotations

import importlib

MODULES = {"table": "table", "json": "json_out", "markdown": "markdown", "text": "text",
           "github": "github", "junit": "junit", "sarif": "sarif"}
# The formats of `check` that print counterfactual and cut norms (the report document); for
# the others, the extra backward passes behind those numbers are skipped.
SHOW_COUNTERFACTUALS = frozenset({"json"})


class _Formats:
    def __getitem__(self, fmt: str):
        return importlib.import_module(f"gradflow.cli.render.{MODULES[fmt]}")


FORMATS = _Formats()


def first_errors(results):
    """Each result, and whether its error is said: once per distinct error, at the first
    result that has it (a bad pyproject.toml makes every model below it invalid with the
    same error, which is one line on stderr and one annotation, not one per model)."""
    said = set()
    for r in results:
        first = r.error is not None and str(r.error) not in said
        if first:
            said.add(str(r.error))
        yield r, first
