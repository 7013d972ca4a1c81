"""`check --format github`: workflow commands, shown as annotations on the pull request."""

from __future__ import annotations

import click

from gradflow.cli.escape import shown
from gradflow.cli.render import first_errors


def escape(text: str, prop: bool = False) -> str:
    text = shown(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def render_check(results, no_color: bool) -> None:
    for r, first in first_errors(results):
        for w in r.warnings:   # of the inputs (--weights), annotated where they point
            at = f",line={w.line},col={w.col}" if w.line else ""
            click.echo(f"::warning file={escape(w.path, True)}{at},title=input::{escape(w.message)}")
        if r.error is not None:
            e = r.error
            if first:
                click.echo(f"::error file={escape(e.path, True)},line={e.line},col={e.col},"
                           f"title=invalid model::{escape(e.message)}")
            continue
        for f in r.report.findings:
            level = "error" if f.severity == "error" else "warning"
            click.echo(f"::{level} file={escape(f.file or f.path, True)},line={f.line},col={f.col},"
                       f"title={f.rule}::{escape(f.message)}")
