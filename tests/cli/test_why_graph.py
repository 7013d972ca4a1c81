"""`gradflow why` and `gradflow graph`: paths and the dependency picture, cuts marked."""

from __future__ import annotations

import textwrap
import time

import pytest
from click.testing import CliRunner

from gradflow.cli.main import cli
from tests.conftest import BLOCK, MODELS, ROOT


SIAMESE = """
    gradflow: 1
    inputs:
      x1: {shape: [4, 3]}
      x2: {shape: [4, 3]}
    modules:
      encoder:
        inputs: [x]
        params:
          w: {shape: [3, 3]}
        graph:
          z: tanh(x @ w)
        output: z
      predictor:
        inputs: [z]
        params:
          v: {shape: [3, 3]}
        graph:
          p: z @ v
        output: p
    graph:
      z1: encoder(x1)
      z2: encoder(x2)
      p1: predictor(z1)
      p2: predictor(z2)
      loss: mean(square(p1 - stop_gradient(z2))) + mean(square(p2 - stop_gradient(z1)))
    losses: [loss]
"""


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_why_marks_the_stop_on_the_generator_path():
    bug = str(ROOT / "tests/models/bugs/gan_stopped_discriminator_output.yaml")
    out = run("why", bug, "G.w1", "--loss", "g_loss").output
    assert out.splitlines()[0] == "G.w1 -> g_loss: blocked"
    assert "1. G.w1 -> fake -> g_loss [x stop_gradient 47:26]" in out


def test_why_lists_each_distinct_path_once():
    out = run("why", str(MODELS / "vq_vae.yaml"), "codebook", "--loss", "recon_loss").output
    assert out.count("[x argmin 24:9]") == 1
    assert "1. codebook -> z_q -> z_st [x stop_gradient 26:15] -> x_hat -> recon_loss" in out
    assert "2. codebook -> dist -> code [x argmin 24:9] -> z_q -> z_st" in out


def test_why_marks_the_argmax_behind_a_sliced_index_not_the_take(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(textwrap.dedent("""
        gradflow: 1
        inputs: {x: {shape: [4, 3]}}
        params: {w: {shape: [4, 3]}}
        graph:
          i: argmax(w, axis=1)
          loss: sum(take(x, i[1:], axis=0))
        losses: [loss]
    """))
    out = run("why", str(path), "w").output
    assert out.splitlines()[:2] == ["w -> loss: blocked", "  1. w -> i [x argmax 6:6] -> loss"]


def test_why_says_when_there_is_no_path():
    out = run("why", str(MODELS / "vae.yaml"), "decoder.w1", "--loss", "kl").output
    assert "decoder.w1 -> kl: unreachable" in out and "no path" in out


def test_why_unknown_parameter_is_an_input_error():
    result = run("why", str(MODELS / "vae.yaml"), "decoder.w9")
    assert result.exit_code == 2
    assert "error: no parameter 'decoder.w9' (did you mean 'decoder.w" in result.stderr


def test_why_names_the_parameters_when_none_is_close_and_says_an_input_is_one():
    gan = str(MODELS / "gan.yaml")
    assert run("why", gan, "nonexistent").stderr == (      # at the first parameter's line, not line 1
        f"{gan}:23:7: error: no parameter 'nonexistent' (it has G.w1, G.b1, G.w2, D.w1, D.b1, D.w2)\n")
    assert run("why", gan, "z").stderr.endswith(
        "error: no parameter 'z' (it is an input: only parameters are followed)\n")
    assert run("why", gan, "g.w1").stderr.endswith("error: no parameter 'g.w1' (did you mean 'G.w1'?)\n")


def diamonds(n: int, depth: int = 1, inside: bool = False) -> str:
    """A model of n diamonds from w to the loss: between entries (2 ** n paths of entries), or
    inside one entry each, every branch a chain of ``depth`` ops (2 ** n tape paths, one of entries)."""
    def chain(fn, x):
        for _ in range(depth):
            x = f"{fn}({x})"
        return x
    lines = ["gradflow: 1", "inputs:", "  x: {shape: [4]}", "params:", "  w: {shape: [4], init: ones}",
             "graph:", "  h0: x * w"]
    for i in range(1, n + 1):
        a, b = chain("tanh", f"h{i - 1}"), chain("sin", f"h{i - 1}")
        lines += [f"  h{i}: {a} + {b}"] if inside else [f"  a{i}: {a}", f"  b{i}: {b}", f"  h{i}: a{i} + b{i}"]
    return "\n".join(lines + [f"  loss: sum(h{n})", "losses: [loss]", ""])


def test_why_limit_cuts_the_list_and_says_how_many_more(write_model):
    out = run("why", write_model(diamonds(3)), "w", "--limit", "2").output
    assert "  1. w -> h0 -> a1 -> h1 -> a2 -> h2 -> a3 -> h3 -> loss" in out
    assert "  2. " in out and "  3. " not in out
    assert "... 6 more paths not shown (raise --limit)" in out


def test_why_shows_a_flowing_path_and_every_cut_first(write_model):
    from gradflow.cli import run as commands
    text = diamonds(10).replace("b1: sin(h0)", "b1: sin(stop_gradient(h0))")
    _, [(_, _, found, more)] = commands.why(write_model(text), "w", limit=2)
    first, second = ([step.entry for step in path.steps] for path in found)
    assert first == ["w", "h0"] + [n for i in range(1, 11) for n in (f"a{i}", f"h{i}")] + ["loss"]
    assert not found[0].cut
    assert second[:3] == ["w", "h0", "b1"] and [c.op for c in found[1].steps[2].cuts] == ["stop_gradient"]
    assert more == 2 ** 10 - 2   # every path counted, deep in the model or not


def test_why_counts_a_partly_cut_edge_as_a_flowing_and_a_cut_path(write_model):
    path = write_model("""
        gradflow: 1
        params:
          w: {shape: [3], init: ones}
        graph:
          h: w * 2
          y: h * stop_gradient(h)
          loss: sum(y)
        losses: [loss]
    """)
    lines = run("why", path, "w", "--limit", "5").output.splitlines()
    assert lines[1:3] == ["  1. w -> h -> y -> loss", "  2. w -> h -> y [x stop_gradient 6:10] -> loss"]


def test_why_on_many_diamonds_is_fast(write_model):
    from gradflow.cli import run as commands
    path = write_model(diamonds(15, depth=80, inside=True))
    started = time.perf_counter()
    _, [(_, pair, found, more)] = commands.why(path, "w", limit=20)
    assert time.perf_counter() - started < 3.0   # generous: exponential enumeration took 8 s
    assert pair.status == "flows" and len(found) == 1 and more == 0
    started = time.perf_counter()
    _, [(_, _, found, more)] = commands.why(write_model(diamonds(40), "wide.yaml"), "w", limit=20)
    assert time.perf_counter() - started < 3.0
    assert len(found) == 20 and more == 2 ** 40 - 20


def test_why_names_each_call_of_a_shared_module(write_model):
    path = write_model(SIAMESE)
    out = run("why", path, "encoder.w").output
    assert "1. encoder.w -> z1 -> p1 -> loss" in out
    assert "encoder.w -> z2 -> loss [x stop_gradient" in out
    assert "encoder.z" not in out


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


def test_why_and_gf107_say_that_the_paths_of_a_zero_gradient_cancel_when_no_op_kills_it(write_model):
    # b * x - b * x: each path carries +-x into b, and nothing on either path is zero
    path = write_model("""
        gradflow: 1
        params:
          b: {shape: [3], init: ones}
        inputs:
          x: {shape: [3], init: ones}
        graph:
          loss: sum(b * x - b * x)
        losses: [loss]
    """)
    out = run("why", path, "b").output
    assert out.splitlines()[:2] == ["b -> loss: zero",
                                    "  the paths' gradients are not zero, but cancel each other out in the parameter"]
    checked = run("check", path).output
    assert "the gradient from loss into b is exactly zero; the paths' gradients cancel each other out [GF107]" \
        in checked


def test_graph_draws_one_node_per_call_of_a_shared_module():
    out = run("graph", str(MODELS / "gan.yaml"), "--loss", "g_loss").output
    assert "real" not in out and "d_fake" not in out and "D.logit" not in out
    assert "fake" in out and "D.w1 (param)" in out
    d_loss = run("graph", str(MODELS / "gan.yaml"), "--loss", "d_loss").output
    assert "├── d_real" in d_loss and "└── d_fake" in d_loss
    assert "fake  x stop_gradient 43:13" in d_loss


@pytest.mark.parametrize("fmt", ["dot", "mermaid"])
def test_graph_with_a_loss_shows_only_what_reaches_it(fmt):
    out = run("graph", str(MODELS / "gan.yaml"), "--format", fmt, "--loss", "g_loss").output
    assert '"fake"' in out and '"g_loss"' in out
    assert '"real"' not in out and '"d_real"' not in out and '"d_loss"' not in out
    everything = run("graph", str(MODELS / "gan.yaml"), "--format", fmt).output
    assert '"d_real"' in everything and '"d_loss"' in everything


def test_graph_siamese_calls_are_separate_nodes(write_model):
    out = run("graph", write_model(SIAMESE), "--format", "dot").output
    assert '"x1" -> "z1";' in out and '"x2" -> "z2";' in out and '"x1" -> "z2"' not in out
    assert '"encoder.w" -> "z1";' in out and '"encoder.w" -> "z2";' in out
    assert '"z1" -> "p1";' in out and '"z1" -> "loss" [style=dashed, color=red' in out


EVERY_KIND = """
    gradflow: 1
    inputs:
      idx: {shape: [2], dtype: int}
    params:
      w: {shape: [3], init: ones}
    graph:
      h: w * 2
      y: h * stop_gradient(h)
      c: stop_gradient(h) * 3
      t: take(y, idx) + c[0]
      loss: sum(t)
    losses: [loss]
"""


def test_graph_draws_flowing_partly_cut_cut_and_gradient_free_edges_differently(write_model):
    path = write_model(EVERY_KIND)
    dot = run("graph", path, "--format", "dot").output
    assert '"w" -> "h";' in dot
    assert '"h" -> "y" [color=orange, label="partly cut: stop_gradient 8:10"];' in dot
    assert '"h" -> "c" [style=dashed, color=red, label="stop_gradient 9:6"];' in dot
    assert '"idx" -> "t" [style=dotted];' in dot
    mermaid = run("graph", path, "--format", "mermaid").output
    ids = {name: f"n{i}" for i, name in enumerate(["idx", "w", "h", "y", "c", "t", "loss"])}
    assert f"{ids['w']} --> {ids['h']}" in mermaid
    assert f"{ids['h']} ==>|partly cut: stop_gradient 8:10| {ids['y']}" in mermaid
    assert f"{ids['h']} -.->|stop_gradient 9:6| {ids['c']}" in mermaid
    assert f"{ids['idx']} -.-> {ids['t']}" in mermaid
    tree = run("graph", path).output
    assert "h  ~ partly cut: stop_gradient 8:10" in tree
    assert "h  x stop_gradient 9:6 (above)" in tree
    assert "idx (input)  (no gradient)" in tree


def test_graph_names_a_repeated_stop_once_and_stays_fast(write_model):
    path = write_model("""
        gradflow: 1
        inputs:
          x: {shape: [4]}
        params:
          w: {shape: [4], init: ones}
        modules:
          block:
            inputs: [h]
            graph:
              y: tanh(h) + stop_gradient(h) * 0.5
            output: y
        graph:
          h0: x * w
          h: repeat(block, h0, times=3000)
          loss: sum(h)
        losses: [loss]
    """)
    started = time.perf_counter()
    out = run("graph", path, "--format", "dot").output
    assert time.perf_counter() - started < 5.0   # generous; linear in the 15,000 nodes
    assert '"h0" -> "h" [color=orange, label="partly cut: stop_gradient 10:20"];' in out


def test_why_names_the_instance_a_cut_inside_a_repeated_block_is_in(write_model):
    # Every instance's stop is at the same line:col: only its node says which block cuts.
    path = write_model(BLOCK.replace("h + tanh", "stop_gradient(h) + tanh")
                       + "graph:\n  h: repeat(block, x, times=3)\n  loss: sum(h)\nlosses: [loss]\n")
    out = run("why", path, "block.0.w").output
    assert "h [x stop_gradient in block.1.out 11:12] [x stop_gradient in block.2.out 11:12] -> loss" in out


# rich draws for a terminal without colour codes, and not a dumb one (which rich holds to 80 columns)
TERMINAL = {"FORCE_COLOR": "1", "NO_COLOR": "1", "TERM": "xterm"}


def on_terminal(columns: int, *args) -> str:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": str(columns), **TERMINAL}).output


@pytest.mark.parametrize("model, labels", [
    ("byol.yaml", ["x stop_gradient 19:11"]),
    ("rbm_contrastive_divergence.yaml", ["x less 19:13 (above)", "(no gradient)"]),
    ("vq_vae.yaml", ["x stop_gradient 26:15", "x argmin 24:9", "stop_gradient 26:15"]),
])
def test_graph_tree_in_a_narrow_terminal_wraps_between_labels_never_inside_a_cut(model, labels):
    out = on_terminal(40, "graph", str(MODELS / model))
    lines = out.splitlines()
    assert all(len(line) <= 40 for line in lines)
    assert [line for line in lines if line != line.rstrip()] == []     # no blanks where a line wrapped
    assert out.endswith("\n") and "\n\n" not in out
    for text in labels:      # a cut's mark with its place, '(no gradient)' whole, on one line
        assert any(line.endswith(text) for line in lines), text
    piped = run("graph", str(MODELS / model)).output
    assert " ".join(out.replace("│", " ").split()) == " ".join(piped.replace("│", " ").split())


def test_graph_tree_deeper_than_the_terminal_is_wide_loses_no_entry_and_splits_no_name(write_model):
    chain = "".join(f"  h{k}: tanh(h{k - 1})\n" for k in range(1, 14))
    path = write_model("gradflow: 1\ninputs:\n  x: {shape: [3]}\nparams:\n  weight_of_the_first_layer: {shape: [3]}\n"
                       "graph:\n  h0: x * weight_of_the_first_layer\n" + chain + "  loss: sum(h13)\nlosses: [loss]\n")
    out = on_terminal(40, "graph", path)
    assert out == run("graph", path).output     # no room beside the guides: whole lines, as into a pipe
    assert "└── weight_of_the_first_layer (param)" in out and all(f"└── h{k}\n" in out for k in range(13))


def test_graph_tree_in_a_wide_terminal_is_what_a_pipe_gets():
    for model in ("vq_vae.yaml", "gan.yaml", "rbm_contrastive_divergence.yaml"):
        assert on_terminal(200, "graph", str(MODELS / model)) == run("graph", str(MODELS / model)).output


def test_why_puts_a_blank_line_between_losses_and_none_after_the_last():
    out = run("why", str(MODELS / "gan.yaml"), "G.w1").output
    assert out.endswith("-> g_loss\n") and out.count("\n\n") == 1
    assert "\n\nG.w1 -> g_loss: flows" in out


def test_why_in_a_narrow_terminal_keeps_each_cut_mark_whole_within_the_width():
    # codebook_loss and its mark cannot share a 35-column line: the mark goes on the next, whole
    out = on_terminal(40, "why", str(MODELS / "vq_vae.yaml"), "enc.w")
    lines = out.splitlines()
    assert all(len(line) <= 40 for line in lines) and not out.endswith("\n\n")
    assert "     [x stop_gradient 29:36] -> loss" in lines
    # an entry and its mark together where they fit, to the last column
    assert "     code [x argmin 24:9] -> z_q ->" in lines and "     commit_loss [x stop_gradient 30:34]" in lines
    piped = run("why", str(MODELS / "vq_vae.yaml"), "enc.w").output
    assert out.split() == piped.split()


def test_why_on_a_terminal_writes_the_spaces_that_hold_a_cut_mark_together_as_plain_spaces():
    # a mark copied from the terminal, '[x stop_gradient 29:36]', must match what a pipe prints;
    # str.split() takes no-break spaces for blanks, so each is looked for itself
    for columns in (40, 200):
        out = on_terminal(columns, "why", str(MODELS / "vq_vae.yaml"), "enc.w")
        assert "\u00a0" not in out and "\u202f" not in out
        assert "codebook_loss [x stop_gradient 29:36]" in " ".join(out.split())
    assert "codebook_loss [x stop_gradient 29:36] -> loss" in out   # at 200 columns, as a pipe has it


def test_graph_tree_on_a_colour_terminal_colours_the_labels_not_the_blanks_before_them():
    out = CliRunner().invoke(cli, ["graph", str(MODELS / "dqn.yaml")], color=True,
                             env={"COLUMNS": "100", "FORCE_COLOR": "1", "TERM": "xterm"}).output
    assert "q_next  \x1b[31mx stop_gradient 37:14\x1b[0m" in out
    assert "action \x1b[2m(input)\x1b[0m  \x1b[2m(no gradient)\x1b[0m" in out
