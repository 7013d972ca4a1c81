"""`check --format sarif`: SARIF 2.1.0, for code-scanning dashboards."""

from __future__ import annotations

import os
from pathlib import PurePath
from urllib.parse import quote

import gradflow
from gradflow.analysis.settings import RULES
from gradflow.cli.render.json_out import dump

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INVALID = "invalid-model"


def uri(path: str) -> str:
    """A path as SARIF's artifactLocation.uri, which is a URI reference: a space, '%', '#' or
    ':' percent-encoded (a file name's bytes as they are, UTF-8 or not); an absolute path a
    file:// URI. A relative path stays relative: code scanning resolves it from the checkout."""
    path = PurePath(path)
    if path.is_absolute():
        return path.as_uri()
    return quote(os.fsencode(path.as_posix()))


def result(rule, level, message, path, line, col) -> dict:
    return {"ruleId": rule, "level": level, "message": {"text": message},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri(path)},
                                                "region": {"startLine": line, "startColumn": col}}}]}


def render_check(results, no_color: bool) -> None:
    out = []
    for r in results:
        if r.error is not None:
            e = r.error
            out.append(result(INVALID, "error", e.message, e.path, e.line or 1, e.col or 1))
        else:
            out += [result(f.rule, f.severity, f.message, f.file or f.path, f.line, f.col) for f in r.report.findings]
    # Every ruleId a result names is described, the invalid-model error too.
    described = {**RULES, INVALID: ("error", "the model file (or Python step) cannot be read or built")}
    rules = [{"id": rule, "shortDescription": {"text": text},
              "defaultConfiguration": {"level": "none" if level == "off" else level}}
             for rule, (level, text) in described.items()]
    dump({"$schema": SCHEMA, "version": "2.1.0",
          "runs": [{"tool": {"driver": {"name": "gradflow", "version": gradflow.__version__,
                                        "rules": rules}},
                    "results": out}]})
