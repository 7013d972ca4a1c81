"""Every example in examples/torch against PyTorch itself: gradients, statuses, cut places,
the check verdict, and the `import -o` round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import gradflow  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "torch"
STEPS = [("gan.py", "gan_step"), ("gan.py", "gan_step_bug"), ("actor_critic.py", "actor_critic_step"),
         ("actor_critic.py", "actor_critic_bug"), ("dqn.py", "dqn_step"), ("vqvae.py", "vqvae_step"),
         ("byol.py", "byol_step"), ("cnn_batchnorm.py", "cnn_step"), ("gpt_block.py", "gpt_step"),
         ("frozen_encoder.py", "finetune_step"), ("dann.py", "dann_step"), ("ppo.py", "ppo_step"),
         ("ppo.py", "ppo_bug")]
BUGS = ("gan_step_bug", "actor_critic_bug", "ppo_bug")


@pytest.mark.parametrize("file, func", STEPS, ids=[f for _, f in STEPS])
def test_example_gradients_and_statuses_equal_torch_autograd(file, func, same_as_torch):
    same_as_torch(gradflow.analyze(gradflow.load(f"{EXAMPLES / file}:{func}")), str(EXAMPLES / file), func)


def line_of(file: str, text: str) -> int:
    lines = (EXAMPLES / file).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


@pytest.mark.parametrize("file, func, param, loss, text, op", [
    ("gan.py", "gan_step_bug", "G.0.weight", "g_loss", "self.D(fake).detach()", "stop_gradient"),
    ("actor_critic.py", "actor_critic_step", "critic.0.weight", "policy_loss", "advantage.detach()",
     "stop_gradient"),
    ("dqn.py", "dqn_step", "target.0.weight", "td_loss", "with torch.no_grad():", "no_grad"),
])
def test_example_cut_points_at_the_python_line(file, func, param, loss, text, op):
    report = gradflow.analyze(gradflow.load(f"{EXAMPLES / file}:{func}"))
    entry = next(p for p in report.to_dict()["params"] if p["name"] == param)
    cuts = entry["grads"][loss]["cut_by"]
    assert [(Path(c["file"]).name, c["line"], c["op"]) for c in cuts] == [(file, line_of(file, text), op)]


def run_cli(*args):
    from click.testing import CliRunner

    from gradflow.cli.main import cli
    return CliRunner().invoke(cli, list(args))


def test_example_check_fails_on_the_gan_bug_naming_the_detach_line():
    result = run_cli("check", "--format", "json", f"{EXAMPLES / 'gan.py'}:gan_step_bug")
    assert result.exit_code == 1
    findings = json.loads(result.stdout)["files"][0]["findings"]
    gf103 = [f for f in findings if f["rule"] == "GF103"]
    detach = f"gan.py:{line_of('gan.py', 'self.D(fake).detach()')}:"
    assert {p for f in gf103 for p in f["params"]} == {"G.0.weight", "G.0.bias", "G.2.weight", "G.2.bias"}
    assert len(gf103) == 1      # one cause, one finding
    assert all(detach in f["message"] and Path(f["file"]).name == "gan.py" for f in gf103)
    (gf110,) = [f for f in findings if f["rule"] == "GF110"]
    assert (gf110["loss"], gf110["line"]) == ("g_loss", line_of("gan.py", "g_loss = F.softplus(-score)"))
    assert detach in gf110["message"]


def test_example_cnn_warns_only_that_biases_before_batchnorm_never_learn():
    # As its docstring says: BatchNorm removes the constant a bias adds, so that gradient is ~0.
    result = run_cli("check", "--format", "json", f"{EXAMPLES / 'cnn_batchnorm.py'}:cnn_step")
    assert result.exit_code == 0
    [gf108] = json.loads(result.stdout)["files"][0]["findings"]
    assert (gf108["rule"], gf108["params"]) == ("GF108", ["conv1.bias", "conv2.bias"])


def test_example_forgotten_detach_fails_check_and_is_gf104():
    result = run_cli("check", "--format", "json", f"{EXAMPLES / 'actor_critic.py'}:actor_critic_bug")
    assert result.exit_code == 1     # the right step's expectations do not hold
    findings = json.loads(result.stdout)["files"][0]["findings"]
    assert {(f["rule"], f["loss"]) for f in findings if f["rule"] == "GF104"} == {("GF104", "policy_loss")}
    [gf100] = [f for f in findings if f["rule"] == "GF100"]
    assert gf100["loss"] == "policy_loss" and all(p.startswith("critic.") for p in gf100["params"])


def test_example_ppo_whose_old_log_probabilities_take_gradient_fails_check_as_the_paths_cancel():
    result = run_cli("check", "--format", "json", f"{EXAMPLES / 'ppo.py'}:ppo_bug")
    assert result.exit_code == 1
    findings = json.loads(result.stdout)["files"][0]["findings"]
    assert {(f["rule"], f["loss"]) for f in findings} == {("GF100", "policy_loss"), ("GF107", "policy_loss")}
    [gf107] = [f for f in findings if f["rule"] == "GF107"]
    assert set(gf107["params"]) == {"actor.0.weight", "actor.0.bias", "actor.2.weight", "actor.2.bias"}
    assert gf107["message"].endswith("is exactly zero; the paths' gradients cancel each other out")


@pytest.mark.parametrize("file, func", [s for s in STEPS if s[1] not in BUGS])
def test_example_check_passes_on_the_right_steps(file, func):
    assert run_cli("check", f"{EXAMPLES / file}:{func}").exit_code == 0


def comparable(document: dict) -> dict:
    """A report without what names the file it was read from: the parameters' and losses'
    lines are the written model file's, or for the step itself its Python lines."""
    document = dict(document)
    document.pop("model")
    for finding in document["findings"]:
        finding.pop("path", None)
        finding.pop("command", None)      # `gradflow why MODEL ...` names the file too
    for record in document["params"] + document["losses"]:
        record.pop("line")
    return document


@pytest.mark.parametrize("file, func", [("gan.py", "gan_step_bug"), ("gpt_block.py", "gpt_step")])
def test_example_import_round_trip_gives_the_same_report(file, func, tmp_path, monkeypatch):
    monkeypatch.chdir(EXAMPLES.parent.parent)
    target = f"examples/torch/{file}:{func}"
    out = tmp_path / "model.yaml"
    assert run_cli("import", "torch", target, "-o", str(out)).exit_code == 0
    direct = run_cli("analyze", "--format", "json", target)
    again = run_cli("analyze", "--format", "json", str(out), "--weights", str(tmp_path / "model.npz"))
    assert comparable(json.loads(direct.stdout)) == comparable(json.loads(again.stdout))
    # The README's CI step: `check` of the written file with its weights, no torch needed.
    checked = run_cli("check", "--format", "json", str(out), "--weights", str(tmp_path / "model.npz"))
    assert checked.exit_code == run_cli("check", target).exit_code
    assert comparable(json.loads(checked.stdout)["files"][0]) == comparable(json.loads(direct.stdout))


@pytest.mark.parametrize("file, func, frozen", [("byol.py", "byol_step", "target."),
                                                ("frozen_encoder.py", "finetune_step", "encoder.")])
def test_example_requires_grad_false_is_reported_frozen(file, func, frozen):
    document = gradflow.analyze(gradflow.load(f"{EXAMPLES / file}:{func}")).to_dict()
    assert {p["name"]: p["frozen"] for p in document["params"]} == {
        p["name"]: p["name"].startswith(frozen) for p in document["params"]}
    assert any(p["frozen"] for p in document["params"])
