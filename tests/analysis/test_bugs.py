"""The real bugs gradflow exists to catch, each a one-line change to a shipped model."""

from __future__ import annotations

from pathlib import Path

import pytest

import gradflow

BUGS = Path(__file__).resolve().parent.parent / "models" / "bugs"


def findings(name: str) -> set:
    report = gradflow.analyze(gradflow.load(BUGS / name))
    return {(f.rule, param) for f in report.findings for param in f.params or [None]}


def test_bug_vq_vae_codebook_never_learns():
    found = findings("vq_vae_without_codebook_loss.yaml")
    assert ("GF102", "codebook") in found
    assert ("GF103", "codebook") in found


def test_bug_dqn_target_network_leaks_gradient():
    found = findings("dqn_target_leak.yaml")
    assert {p for rule, p in found if rule == "GF100"} == {"target.w1", "target.b1", "target.w2"}


def test_bug_dqn_leak_is_also_caught_by_gf104_without_expectations():
    model = gradflow.load(BUGS / "dqn_target_leak.yaml")
    model.spec.expect = {}
    from gradflow.analysis.settings import settings_for
    report = gradflow.analyze(model, settings=settings_for(model))
    assert {(f.rule, f.severity) for f in report.findings} == {("GF104", "warning")}


def test_a_finding_about_one_instance_of_a_shared_module_points_at_that_instance():
    # qnet declares w1 once for online and target: the leak is the target's, at 'target: qnet'.
    report = gradflow.analyze(gradflow.load(BUGS / "dqn_target_leak.yaml"))
    [leak] = [f for f in report.findings if f.rule == "GF104"]
    lines = (BUGS / "dqn_target_leak.yaml").read_text().splitlines()
    assert lines[leak.line - 1] == "  target: qnet" and leak.col == lines[leak.line - 1].index("qnet") + 1
    assert {p["name"]: p["line"] for p in report.to_dict()["params"]}["target.w1"] == \
        lines.index("      w1: {shape: [obs, hidden]}") + 1    # the JSON keeps where it is declared


def test_a_module_called_by_its_own_name_keeps_its_findings_at_its_parameters():
    report = gradflow.analyze(gradflow.load(BUGS / "gan_stopped_discriminator_output.yaml"))
    [gf102] = [f for f in report.findings if f.rule == "GF102"]
    lines = (BUGS / "gan_stopped_discriminator_output.yaml").read_text().splitlines()
    assert lines[gf102.line - 1].strip().startswith("w1:")   # one instance: its declaration says it all


def test_bug_gan_generator_learns_nothing_when_d_output_is_stopped():
    found = findings("gan_stopped_discriminator_output.yaml")
    assert {p for rule, p in found if rule == "GF102"} == {"G.w1", "G.b1", "G.w2"}
    assert {p for rule, p in found if rule == "GF103"} == {"G.w1", "G.b1", "G.w2"}


def test_bug_actor_critic_critic_trained_by_policy_loss():
    found = findings("actor_critic_unstopped_advantage.yaml")
    assert {p for rule, p in found if rule == "GF100"} == {"critic.w1", "critic.b1", "critic.w2"}


@pytest.mark.parametrize("name", sorted(p.name for p in BUGS.glob("*.yaml")))
def test_bug_fixture_fails_check_with_exit_1(name):
    from click.testing import CliRunner

    from gradflow.cli.main import cli
    result = CliRunner().invoke(cli, ["check", str(BUGS / name)])
    assert result.exit_code == 1, result.output
