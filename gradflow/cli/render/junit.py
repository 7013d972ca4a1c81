"""`check --format junit`: JUnit XML, one testcase per model and rule; a rule the model's
settings turn off, or one that needs gradient values in a --structural run, is a skipped
testcase, not a passing one."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import click

from gradflow.analysis.settings import NUMERIC_RULES, RULES
from gradflow.cli.escape import shown


def unchecked(report, rule: str) -> str | None:
    """Why ``rule`` was not checked for this model, or None when it was."""
    if report.settings.severity(rule) == "off":
        return f"{rule} is ignored (--ignore, check: or pyproject.toml)"
    if rule in NUMERIC_RULES and report.model["mode"] == "structural":
        return f"{rule} needs gradient values, which a --structural run does not compute"
    return None


def render_check(results, no_color: bool) -> None:
    suites = ET.Element("testsuites", name="gradflow")
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for r in results:
        suite = ET.SubElement(suites, "testsuite", name=shown(r.path))
        cases = failures = errors = skipped = 0
        if r.error is not None:   # an <error>, counted as one: the model could not be checked at all
            case = ET.SubElement(suite, "testcase", name="model is valid", classname=shown(r.path))
            ET.SubElement(case, "error", message=shown(r.error.message)).text = shown(r.error)
            cases, errors = 1, 1
        else:
            for rule, (_, description) in RULES.items():
                found = [f for f in r.report.findings if f.rule == rule]
                case = ET.SubElement(suite, "testcase", name=f"{rule} {description}", classname=shown(r.path))
                cases += 1
                reason = unchecked(r.report, rule)
                if reason:
                    skipped += 1
                    ET.SubElement(case, "skipped", message=reason)
                    continue
                failing = [f for f in found if f.severity == "error" or r.report.settings.strict]
                if failing:
                    failures += 1
                    text = "\n".join(shown(f"{f.file or f.path}:{f.line}:{f.col}: {f.message}") for f in failing)
                    ET.SubElement(case, "failure", message=shown(failing[0].message)).text = text
                elif found:
                    ET.SubElement(case, "system-out").text = "\n".join(
                        shown(f"{f.file or f.path}:{f.line}:{f.col}: warning: {f.message}") for f in found)
        for key, count in zip(totals, (cases, failures, errors, skipped)):
            suite.set(key, str(count))
            totals[key] += count
    for key, count in totals.items():
        suites.set(key, str(count))
    ET.indent(suites)
    click.echo(ET.tostring(suites, encoding="unicode", xml_declaration=True))
