"""The user's guide is true: its example models pass, and each rule's example fires it."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from gradflow.cli.main import cli
from tests.conftest import ROOT

DOCS = ROOT / "docs"
BLOCK = re.compile(r"```yaml\n(.*?)```", re.DOTALL)


def models_in(text: str) -> list:
    """The complete models among a page's yaml blocks (fragments show one section)."""
    return [block for block in BLOCK.findall(text) if block.startswith("gradflow: 1")]


def rule_sections() -> list:
    text = (DOCS / "rules.md").read_text(encoding="utf-8")
    out = []
    for section in re.split(r"\n## ", text)[1:]:
        ids = re.findall(r"GF1\d\d", section.splitlines()[0])
        for model in models_in(section):
            out.append((section.splitlines()[0], ids, model))
    return out


@pytest.mark.parametrize("model", models_in((DOCS / "format.md").read_text(encoding="utf-8")),
                         ids=lambda m: m.splitlines()[1][:30])
def test_format_guide_examples_pass_check(model, tmp_path):
    path = tmp_path / "example.yaml"
    path.write_text(model, encoding="utf-8")
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("title, ids, model", rule_sections(), ids=lambda v: v if isinstance(v, str) else "")
def test_each_rule_example_fires_its_rule(title, ids, model, tmp_path):
    import json
    path = tmp_path / "example.yaml"
    path.write_text(model, encoding="utf-8")
    doc = json.loads(CliRunner().invoke(cli, ["check", str(path), "--format", "json"]).stdout)
    fired = {f["rule"] for f in doc["files"][0]["findings"]}
    assert set(ids) <= fired, (title, fired)


def test_every_rule_has_an_example():
    from gradflow.analysis.settings import RULES
    covered = {rule for _, ids, _ in rule_sections() for rule in ids}
    assert covered == set(RULES)


def test_pre_commit_hook_runs_gradflow_check_on_model_files():
    import yaml
    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert hook["id"] == "gradflow-check" and hook["entry"] == "gradflow check"
    assert re.search(hook["files"], "models/gan.yaml") and not re.search(hook["files"], "ci.yml")


def readme_transcripts() -> list:
    """(command, output) of each `$ gradflow ...` the README shows, up to the next prompt."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"```\n(\$ gradflow .*?)```", text, re.DOTALL):
        for part in re.split(r"^(?=\$ )", block, flags=re.MULTILINE):
            command, _, output = part.partition("\n")
            if command.startswith("$ gradflow "):
                out.append(pytest.param(command[len("$ gradflow "):], output, id=command[2:]))
    return out


@pytest.mark.parametrize("command, shown", readme_transcripts())
def test_readme_transcripts_are_what_gradflow_prints(command, shown, monkeypatch):
    # Word for word, in order; the README's lines are wrapped as a terminal wraps them.
    if ".py:" in command:
        pytest.importorskip("torch")
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(cli, command.split())
    assert result.exit_code in (0, 1), result.output
    assert result.output.split() == shown.split()
