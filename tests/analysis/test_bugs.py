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
