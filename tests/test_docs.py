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


def section(text: str, title: str) -> str:
    """The body of the page's `## title` section, up to the next `## `."""
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def gradient_into(op) -> str:
    """What the guide's 'gradient into' column says of an op: the inputs gradient flows into."""
    if op.kind == "stop":
        return "none (stop)"
    if op.kind == "implicit":
        return "none (cut)"
    return ", ".join(["xs"] if op.variadic else [n for k, n in enumerate(op.inputs) if op.has_rule(k)]) or "none"


def test_format_guide_lists_every_op_as_the_op_table_has_it():
    # Each row of docs/format.md's Ops: group, signature and the inputs gradient flows into.
    from gradflow.cli.render.ops import MODULE_CALLS, entries
    from gradflow.engine import ALIASES, OPS
    ops = section((DOCS / "format.md").read_text(encoding="utf-8"), "Ops")
    shown = {}
    for part in ops.split("\n### ")[1:]:
        group, _, body = part.partition("\n")
        shown[group] = [m.groups() for m in re.finditer(r"^\| `([^`]+)` \| ([^|]+?) \|", body, re.MULTILINE)]
    calls = {signature for signature, _, _ in MODULE_CALLS}
    table = {group: [(signature, gradient_into(OPS[signature.split("(")[0]]) if signature not in calls
                      else dict(shown.get(group, [])).get(signature, "")) for signature, _, _ in rows]
             for group, rows in entries().items()}
    rows = lambda groups: [f"{g}: | `{s}` | {d} |" for g, found in groups.items() for s, d in found]
    assert rows(shown) == rows(table)
    for alias, target in ALIASES.items():
        assert f"alias: {alias}" in next(line for line in ops.splitlines() if line.startswith(f"| `{target}("))


def readme_commands() -> dict:
    """Command name -> the text of its usage in the README's Commands block."""
    block = section((ROOT / "README.md").read_text(encoding="utf-8"), "Commands").split("```")[1]
    usage = {}
    for line in block.strip().splitlines():
        if line.startswith("gradflow "):
            words = line.split()
            name = " ".join(words[1:3]) if words[1] == "import" else words[1]
            usage[name] = line.split("#")[0]
        else:
            usage[name] += " " + line.split("#")[0]
    return usage


def test_readme_commands_show_every_flag_of_every_command():
    import click
    ctx = click.Context(cli)
    usage = readme_commands()
    names = [n for n in cli.list_commands(ctx) if n != "import"] + ["import torch", "--version"]
    assert sorted(usage) == sorted(names)
    for name, text in usage.items():
        if name == "--version":
            continue
        command = cli.get_command(ctx, name.split()[0])
        if name == "import torch":
            command = command.get_command(ctx, "torch")
        options = [p for p in command.params if isinstance(p, click.Option)]
        known = {"--no-color", "--debug", "--help", "-h"}   # every command's, said once under the block
        documented = set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", text))
        flags = {opt for p in options for opt in p.opts}
        assert documented <= flags, (name, documented - flags)
        for p in options:
            if not set(p.opts) & known:
                assert set(p.opts) & documented, (name, p.opts)
            if isinstance(p.type, click.Choice):
                assert "|".join(p.type.choices) in text, (name, p.opts, p.type.choices)


def test_rules_guide_lists_every_setting_with_its_default():
    from gradflow.analysis.settings import KEYS, Settings, size
    rows = re.findall(r"^\| `([a-z-]+)` \| ([^|]+?) \|", section((DOCS / "rules.md").read_text(encoding="utf-8"),
                                                                  "Settings"), re.MULTILINE)
    assert [key for key, _ in rows] == list(KEYS)
    default = dict(rows)
    assert float(default["vanishing"].strip("`")) == Settings().vanishing
    assert float(default["exploding"].strip("`")) == Settings().exploding
    assert size(default["max-memory"].strip('`"')) == Settings().max_memory
    assert default["strict"] == f"`{str(Settings().strict).lower()}`"


def test_readme_json_report_is_what_gradflow_prints(monkeypatch):
    import json
    [shown] = re.findall(r"```json\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.DOTALL)
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(cli, ["analyze", "models/stop_gradient_tape.yaml", "--format", "json"])
    printed, shown = json.loads(result.stdout), json.loads(shown)
    assert shown.pop("gradflow_version") and printed.pop("gradflow_version")
    assert shown == printed
