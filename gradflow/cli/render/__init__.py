"""One module per output format; each has render_report(report, no_color) and/or
render_check(results, no_color). Imported on demand so JSON output never loads rich."""

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
