"""`gradflow why` and `gradflow graph`: paths and the dependency picture, cuts marked."""

from __future__ import annotations

from click.testing import CliRunner

from gradflow.cli.main import cli
from tests.conftest import MODELS, ROOT


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_why_marks_the_stop_on_the_generator_path():
    bug = str(ROOT / "tests/models/bugs/gan_stopped_discriminator_output.yaml")
    out = run("why", bug, "G.w1", "--loss", "g_loss").output
    assert out.splitlines()[0] == "G.w1 -> g_loss: blocked"
    assert "G.w1 -> G.h -> G.x -> D.h -> D.logit -> g_loss [x stop_gradient 47:26]" in out


def test_why_lists_each_distinct_path_once():
    out = run("why", str(MODELS / "vq_vae.yaml"), "codebook", "--loss", "recon_loss").output
    assert out.count("[x argmin 24:9]") == 1
    assert "2. codebook -> z_q -> z_st [x stop_gradient 26:15] -> x_hat -> recon_loss" in out


def test_why_says_when_there_is_no_path():
    out = run("why", str(MODELS / "vae.yaml"), "decoder.w1", "--loss", "kl").output
    assert "decoder.w1 -> kl: unreachable" in out and "no path" in out


def test_why_unknown_parameter_is_an_input_error():
    result = run("why", str(MODELS / "vae.yaml"), "decoder.w9")
    assert result.exit_code == 2
    assert "error: no parameter 'decoder.w9' (did you mean 'decoder.w" in result.stderr


def test_why_limit_cuts_the_list_and_says_so():
    out = run("why", str(MODELS / "transformer.yaml"), "wte", "--limit", "2").output
    assert "  2. " in out and "  3. " not in out and "more paths not shown" in out


def test_graph_dot_draws_cut_edges_dashed_with_the_cut():
    out = run("graph", str(MODELS / "stop_gradient_tape.yaml"), "--format", "dot").output
    assert '"x" -> "z";' in out
    assert '"y" -> "z" [style=dashed, color=red, label="stop_gradient 12:14"];' in out


def test_graph_tree_shows_a_stop_inside_the_consuming_entry():
    out = run("graph", str(MODELS / "dqn.yaml")).output
    assert "q_next  x stop_gradient 37:14" in out
    assert "online.w1 (param)" in out


def test_graph_mermaid_uses_dotted_arrows_for_cuts():
    out = run("graph", str(MODELS / "stop_gradient_tape.yaml"), "--format", "mermaid").output
    assert out.splitlines()[0] == "flowchart LR"
    assert "n1 -.->|stop_gradient 12:14| n2" in out
    assert "n0 --> n2" in out


def test_why_names_where_a_zero_gradient_dies(write_model):
    path = write_model("""
        gradflow: 1
        params:
          w: {shape: [3], init: ones}
        graph:
          h: relu(-w)
          loss: sum(h) + 1
        losses: [loss]
    """)
    out = run("why", path, "w").output
    assert out.splitlines()[:2] == ["w -> loss: zero", "  the gradient dies at relu in h (line 5:6)"]
    assert "1. w -> h -> loss" in out
