"""`check --format text`: one `path:line:col: severity: message [RULE]` line per finding
(invalid files as `path:line:col: error: ...`), then a one-line summary. The finding and
verdict lines are the table's too. Built as Lines: into a pipe, rich is never loaded."""

from __future__ import annotations

from gradflow.analysis.report import listing
from gradflow.cli.escape import shown
from gradflow.cli.render.lines import Line, output

STYLE = {"error": "bold red", "warning": "yellow"}


def render_check(results, no_color: bool) -> None:
    out = output(no_color)
    for r in results:
        if r.error is not None:   # already on stderr as FILE:LINE:COL: error: ...
            continue
        for f in r.report.findings:
            out.print(finding_line(f), soft_wrap=True)
        out.print(Line(shown(r.path) + ": ", style="dim") + verdict(r.report), soft_wrap=True)
    out.print(summary(results), soft_wrap=True)   # a line, as the findings are: never broken


def summary(results) -> Line:
    """'3 models checked: 1 failed, 1 invalid (5 errors, 0 warnings)': failed and invalid
    models counted apart as the JSON summary counts them; an invalid model is one error."""
    invalid = sum(r.error is not None for r in results)
    failed = sum(r.failed and r.error is None for r in results)
    bad = ", ".join(f"{n:,} {word}" for n, word in ((failed, "failed"), (invalid, "invalid")) if n)
    errors = invalid + sum(r.report.errors for r in results if r.error is None)
    warnings = sum(r.report.warnings for r in results if r.error is None)
    line = Line(f"{plural(len(results), 'model')} checked: ")
    line.append(bad or "ok", "bold red" if bad else "green")
    return line.append(f" ({plural(errors, 'error')}, {plural(warnings, 'warning')})")


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def finding_line(f) -> Line:
    line = Line(shown(f"{f.file or f.path}:{f.line}:{f.col}: "))
    line.append(f.severity, STYLE[f.severity])
    line.append(shown(f": {f.message} [{f.rule}]"))
    if f.command:
        line.append(shown(f" see: {f.command}"), "dim")
    return line


def verdict(report) -> Line:
    """What matters, in one line: what each loss trains, what gets nothing, the findings."""
    trained = []
    for loss in report.losses:
        reached = [p for p in report.params if p.grads[loss.name].status == "flows" and not p.frozen]
        inside = [p for p in reached if loss.meant_to_train(p.name) is not False]   # its wrt, if it has one
        broken = sum(bool(p.grads[loss.name].nonfinite) for p in inside)   # a NaN step trains nothing
        notes = [f"{broken:,} more get{'s' if broken == 1 else ''} a NaN or infinite gradient"] if broken else []
        if len(reached) > len(inside):
            notes.append(f"gradient also reaches {len(reached) - len(inside):,} outside its wrt")
        trained.append(f"{loss.name} trains {plural(len(inside) - broken, 'parameter')}"
                       + (f" ({'; '.join(notes)})" if notes else ""))
    declared = any(l.wrt is not None for l in report.losses)
    starved = [p.name for p in report.params if not p.frozen
               and (not declared or any(l.meant_to_train(p.name) for l in report.losses))
               and all(pair.status in ("blocked", "unreachable") for pair in p.grads.values())]
    line = Line("verdict: " + shown("; ".join(trained)))
    if starved:
        # past six names, a count, as the findings above it list them
        line.append("; no gradient reaches " + shown(listing(starved, last=", ")), "bold red")
    errors, warnings = report.errors, report.warnings
    line.append(f"; {plural(errors, 'error')}, {plural(warnings, 'warning')}",
                "bold red" if errors else "yellow" if warnings else "green")
    return line
