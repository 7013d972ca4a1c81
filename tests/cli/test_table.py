"""The analyze table: collapsed instances, --expand, --problems, intended blocks, the verdict."""

from __future__ import annotations

from click.testing import CliRunner

from gradflow.cli.main import cli
from tests.conftest import MODELS, ROOT

REPEATED = """
gradflow: 1
dims: {d: 4}
inputs:
  x: {shape: [3, d]}
modules:
  block:
    inputs: [h]
    params:
      w: {shape: [d, d]}
    graph:
      y: tanh(h @ w)
    output: y
params:
  head: {shape: [d, 1]}
graph:
  h: repeat(block, x, times=12)
  loss: sum(stop_gradient(h) @ head) + sum(h)
losses: [loss]
"""


def analyze(*args):
    result = CliRunner().invoke(cli, ["analyze", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result.output


def test_repeated_instances_that_agree_are_one_row_unless_expanded(write_model):
    path = write_model(REPEATED)
    out = analyze(path)
    assert "block.{0..11}.w" in out and "block.3.w" not in out
    expanded = analyze(path, "--expand")
    assert all(f"block.{i}.w " in expanded for i in range(12))


def test_norms_of_a_collapsed_row_are_a_range_and_the_number_is_labelled(write_model):
    path = write_model(REPEATED)
    out = analyze(path)
    row = next(line for line in out.splitlines() if line.startswith("block.{0..11}.w"))
    low, high = row.split("flows ")[1].split()[0].split("..")     # '..' as in the name: '1e-14-0.1' misread
    norms = [float(line.split("flows ")[1].split()[0]) for line in analyze(path, "--expand").splitlines()
             if line.startswith("block.")]
    assert (float(low), float(high)) == (min(norms), max(norms)) and len(norms) == 12
    assert "cells: status and gradient L2 norm" in out


def test_partial_cuts_are_visible_in_the_table(write_model):
    out = analyze(write_model(REPEATED))
    assert "~[1]" in out and "[1] partly cut (other paths flow) by stop_gradient in loss" in out


def test_intended_blocks_are_marked_intended():
    out = analyze(MODELS / "gan.yaml")
    assert out.count("blocked [1] (intended)") == 3


def test_problems_shows_only_rows_not_as_intended():
    bug = ROOT / "tests" / "models" / "bugs" / "actor_critic_unstopped_advantage.yaml"
    out = analyze(bug, "--problems")
    rows = [line.split()[0] for line in out.splitlines() if line.startswith(("actor.", "critic."))]
    assert rows and all(name.startswith("critic.") for name in rows)
    assert "every pair is as intended" in analyze(MODELS / "gan.yaml", "--problems")


def test_the_last_line_is_the_verdict():
    ok = analyze(MODELS / "gan.yaml").splitlines()[-1]
    # g_loss's wrt is G: D, which its gradient passes through, is counted apart
    assert ok == ("verdict: d_loss trains 3 parameters; g_loss trains 3 parameters (gradient also reaches 3 "
                  "outside its wrt); 0 errors, 0 warnings")
    bug = analyze(ROOT / "tests" / "models" / "bugs" / "gan_stopped_discriminator_output.yaml").splitlines()[-1]
    assert "g_loss trains 0 parameters" in bug and "no gradient reaches G.w1, G.b1, G.w2" in bug


def test_check_text_ends_each_model_with_its_verdict():
    result = CliRunner().invoke(cli, ["check", str(MODELS / "gan.yaml"), str(MODELS / "vae.yaml")])
    verdicts = [line for line in result.output.splitlines() if ": verdict: " in line]
    assert len(verdicts) == 2 and verdicts[0].startswith(str(MODELS / "gan.yaml"))


def test_counts_are_written_with_thousands_separators_everywhere(write_model):
    path = write_model(REPEATED.replace("times=12", "times=1001"))
    out = analyze(path)
    assert "1,002 parameters, 16,020 values" in out and "loss trains 1,002 parameters" in out


def test_the_legend_of_a_structural_table_promises_no_norms():
    assert "cells: status and gradient L2 norm; ~ partly cut" in analyze(MODELS / "gan.yaml")
    assert "cells: status; ~ partly cut; [n] the notes below" in analyze(MODELS / "gan.yaml", "--structural")
