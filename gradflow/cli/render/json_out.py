"""`--format json`: exactly one JSON document on stdout, nothing else there."""

from __future__ import annotations

import json
import math

import click

from gradflow.cli.escape import encodable


def finite(value):
    """JSON has no NaN or Infinity: write them as strings; strings as valid Unicode."""
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def dump(document) -> None:
    click.echo(json.dumps(finite(document), indent=2, allow_nan=False))


def render_report(report, no_color: bool) -> None:
    dump(report.to_dict())


def error_document(result) -> dict:
    e = result.error
    return {"format": 1, "model": {"path": result.path},
            "error": {"message": e.message, "path": e.path, "line": e.line, "col": e.col},
            "findings": [], "summary": {"errors": 1, "warnings": 0}}


def check_document(results) -> dict:
    files = [r.report.to_dict() if r.report is not None else error_document(r) for r in results]
    return {"format": 1, "files": files,
            "summary": {"files": len(results), "invalid": sum(r.error is not None for r in results),
                        "failed": sum(r.failed for r in results),
                        "errors": sum(f["summary"]["errors"] for f in files),
                        "warnings": sum(f["summary"]["warnings"] for f in files)}}


def render_check(results, no_color: bool) -> None:
    dump(check_document(results))
