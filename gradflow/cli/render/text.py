"""`check --format text`: one `path:line:col: severity: message [RULE]` line per finding
(invalid files as `path:line:col: error: ...`), then a one-line summary."""

from __future__ import annotations

from rich.text import Text

from gradflow.cli.escape import shown
from gradflow.cli.render.console import console

STYLE = {"error": "bold red", "warning": "yellow"}


def render_check(results, no_color: bool) -> None:
    out = console(no_color)
    errors = warnings = 0
    for r in results:
        if r.error is not None:   # already on stderr as FILE:LINE:COL: error: ...
            errors += 1
            continue
        for f in r.report.findings:
            errors += f.severity == "error"
            warnings += f.severity == "warning"
            line = Text(shown(f"{f.file or f.path}:{f.line}:{f.col}: "))
            line.append(f.severity, style=STYLE[f.severity])
            line.append(shown(f": {f.message} [{f.rule}]"))
            if f.command:
                line.append(shown(f" see: {f.command}"), style="dim")
            out.print(line, soft_wrap=True)
    failed = sum(r.failed or r.error is not None for r in results)
    verdict = Text("ok" if not failed else f"{failed} failed", style="green" if not failed else "bold red")
    summary = Text(f"{len(results)} model{'s' * (len(results) != 1)} checked: ")
    summary.append(verdict)
    summary.append(f" ({errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)})")
    out.print(summary)
