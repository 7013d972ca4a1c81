"""`--format markdown`: a GitHub-flavoured table, for pull-request comments and job summaries."""

from __future__ import annotations

import click

from gradflow.cli.escape import shown
from gradflow.cli.render.text import summary, verdict


def cell(pair, intent: str) -> str:
    text = pair.status
    if pair.status == "flows" and pair.norm is not None:
        text += f" {pair.norm:.3g}"
    cuts = pair.cut_by or pair.partly_told
    if cuts:
        text += " (" + ", ".join(f"`{c.op}` in `{c.node}` L{c.line}" for c in cuts) + ")"
    if pair.dies_at:
        text += " (dies at " + ", ".join(f"`{c.op}` in `{c.node}` L{c.line}"
                                         + (f", `{c.zeros}` all zeros" if c.zeros else "") for c in pair.dies_at) + ")"
    if intent == "intended" and pair.status == "unreachable":   # no path at all needs no word
        return text
    return text + {"intended": " *(intended)*", "problem": " **(not as intended)**"}.get(intent, "")


def report_lines(report) -> list:
    m = report.model
    lines = [shown(f"### {m['name']} (`{m['path']}`, {m['mode']})"), "",
             "| parameter | shape | " + " | ".join(l.name for l in report.losses) + " |",
             "|---|---|" + "---|" * len(report.losses)]
    for p in report.params:
        shape = "[" + ", ".join(map(str, p.shape)) + "]"
        frozen = " *(frozen)*" if p.frozen else ""
        lines.append(f"| `{p.name}`{frozen} | {shape} | "
                     + " | ".join(cell(p.grads[l.name], report.intent(p.name, l.name)) for l in report.losses) + " |")
    lines.append("")
    for f in report.findings:
        lines.append(shown(f"- **{f.severity}** {f.rule} `{f.file or f.path}:{f.line}:{f.col}`: {f.message}"))
    if report.findings:
        lines.append("")
    lines.append("**verdict:** " + verdict(report).plain.removeprefix("verdict: "))
    return lines


def render_report(report, no_color: bool) -> None:
    click.echo("\n".join(report_lines(report)))


def render_check(results, no_color: bool) -> None:
    lines = []
    for r in results:
        if r.error is not None:
            lines += [shown(f"### `{r.path}`: invalid"), "", shown(f"- **error** `{r.error}`")]
        else:
            lines += report_lines(r.report)
        lines.append("")
    lines.append(f"**{summary(results).plain}**")
    click.echo("\n".join(lines))
