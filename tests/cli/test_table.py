"""The analyze table: collapsed instances, --expand, --problems, intended blocks, the verdict."""

from __future__ import annotations

import json

import pytest
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


def test_a_zero_gradient_that_is_also_partly_cut_shows_both_notes(write_model):
    out = analyze(write_model("""
gradflow: 1
params:
  w: {shape: [3], init: normal}
graph:
  loss: sum(w * 0 + 1) * max(w > 0)
losses: [loss]
"""))
    assert "zero [1] ~[2] !" in out
    assert "[2] partly cut (other paths carry a zero gradient) by greater in loss (line 5:30)" in out


# Two lines one Python call made (their source places are one): a sort is an argsort and a
# gather of the same rows, whose values take the gradient the indices do not.
ONE_CALL = """
gradflow: 1
inputs:
  x: {shape: [5]}
params:
  w: {shape: [5]}
graph:
  h: {expr: "x * w", source: "train.py:3:9"}
  order: {expr: "argsort(h)", source: "train.py:4:9"}
  top: {expr: "take_along_axis(h, order, axis=0)", source: "train.py:4:9"}
  loss: sum(top[-2:])
losses: [loss]
"""


def test_a_cut_whose_own_call_passes_the_gradient_on_gets_no_partly_cut_note(write_model):
    out = analyze(write_model(ONE_CALL))
    assert "flows" in out and "partly" not in out and "~" not in out
    report = json.loads(CliRunner().invoke(cli, ["analyze", "--format", "json", write_model(ONE_CALL)]).output)
    assert [c["op"] for c in report["params"][0]["grads"]["loss"]["partially_cut_by"]] == ["argsort"]   # still told


@pytest.mark.parametrize("order, top", [
    ("train.py:4:9", "train.py:5:9"),   # the indices leave the call that made them: another gathers by them
    (None, None),                       # a model file's own lines: each op the user's own call
])
def test_a_cut_whose_answer_leaves_its_call_still_gets_a_partly_cut_note(write_model, order, top):
    text = ONE_CALL
    for entry, place in (("order", order), ("top", top)):
        old = next(line for line in text.splitlines() if line.startswith(f"  {entry}:"))
        expr = old.split('expr: "')[1].split('"')[0]
        text = text.replace(old, f'  {entry}: {{expr: "{expr}", source: "{place}"}}' if place else f"  {entry}: {expr}")
    out = analyze(write_model(text))
    assert "flows" in out and "partly cut (other paths flow) by argsort in order" in out


def test_intended_blocks_are_marked_intended():
    out = analyze(MODELS / "gan.yaml")
    assert out.count("blocked [1] (intended)") == 3


def test_a_parameter_with_no_path_to_a_loss_another_trains_is_plainly_unreachable():
    out = analyze(MODELS / "actor_critic.yaml")
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith(("actor.", "critic."))}
    assert rows["actor.w"].rstrip().endswith("flows 0.48               unreachable")
    assert "!" not in rows["actor.w"] and out.count("(intended)") == 3    # the critic's three blocks


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


def test_the_verdict_names_six_starved_parameters_at_most_as_the_findings_do(write_model):
    params = "".join(f"  p{i}: {{shape: [2], init: ones}}\n" for i in range(8))
    path = write_model("gradflow: 1\nparams:\n" + params + "  w: {shape: [2], init: ones}\ngraph:\n"
                       "  loss: sum(w) + sum(stop_gradient(" + " + ".join(f"p{i}" for i in range(8)) + "))\n"
                       "losses: [loss]\n")
    verdict = analyze(path).splitlines()[-1]
    assert "; no gradient reaches p0, p1, p2, p3, p4 and 3 more; " in verdict


def test_check_text_ends_each_model_with_its_verdict():
    result = CliRunner().invoke(cli, ["check", str(MODELS / "gan.yaml"), str(MODELS / "vae.yaml")])
    verdicts = [line for line in result.output.splitlines() if ": verdict: " in line]
    assert len(verdicts) == 2 and verdicts[0].startswith(str(MODELS / "gan.yaml"))


def test_counts_are_written_with_thousands_separators_everywhere(write_model):
    path = write_model(REPEATED.replace("times=12", "times=1001"))
    out = analyze(path)
    assert "1,002 parameters, 16,020 values" in out and "loss trains 1,002 parameters" in out


def test_the_legend_of_a_structural_table_promises_no_norms():
    assert "cells: status and gradient L2 norm; [n] the notes below\n" in analyze(MODELS / "gan.yaml")
    assert "cells: status; [n] the notes below\n" in analyze(MODELS / "gan.yaml", "--structural")


def test_the_legend_explains_only_the_marks_its_cells_show(write_model):
    spare = REPEATED.replace("  head: {shape: [d, 1]}", "  head: {shape: [d, 1]}\n  spare: {shape: [d]}")
    out = analyze(write_model(spare))     # a partial cut, and a parameter no loss reaches
    assert "\ncells: status and gradient L2 norm; ~ partly cut; ! not as intended; [n] the notes below\n" in out
    plain = REPEATED.replace("sum(stop_gradient(h) @ head) + sum(h)", "sum(h @ head)")
    assert "\ncells: status and gradient L2 norm\n" in analyze(write_model(plain))


def test_a_pair_not_as_intended_is_marked_in_words_as_well_as_colour():
    # In a pipe (or to an eye that tells no red from green) only the mark says which cells are wrong.
    out = analyze(ROOT / "tests" / "models" / "bugs" / "gan_stopped_discriminator_output.yaml")
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith(("G.", "D."))}
    assert rows["G.w1"].endswith("blocked [1] (intended)   blocked [2] !")
    assert rows["D.w1"].split()[3:] == ["flows", "0.225", "blocked", "[2]", "!"]
    assert "!" not in analyze(MODELS / "gan.yaml")   # every pair as intended: nothing marked


def test_a_nan_gradient_is_not_counted_as_training_and_its_cell_is_marked(write_model):
    # An optimizer step with a NaN gradient ruins the parameter: GF105's error, not training.
    path = write_model("""
        gradflow: 1
        params:
          w: {shape: [3], init: ones}
          v: {shape: [3], init: ones}
          u: {shape: [3], init: ones}
        graph:
          loss: sum(log(w - 2) * v) + sum(u)
        losses: [loss]
        """)
    out = analyze(path)
    assert out.splitlines()[-1] == ("verdict: loss trains 2 parameters (1 more gets a NaN or infinite gradient); "
                                    "2 errors, 0 warnings")
    assert "\nv            [3]     flows nan (3 non-finite) !\n" in out
    assert "\nw            [3]     flows 1.73\n" in out


def test_the_header_says_where_the_values_come_from(tmp_path):
    import numpy as np
    assert "\nnumeric, seed 3; 6 parameters" in analyze(MODELS / "gan.yaml", "--seed", "3")
    weights = tmp_path / "w.npz"
    np.savez(weights, **{"G.b1": np.ones(16)})
    result = CliRunner().invoke(cli, ["analyze", str(MODELS / "gan.yaml"), "--weights", str(weights)])
    assert f"\nnumeric, seed 0, weights {weights}; 6 parameters" in result.stdout
    assert "\nstructural (no numbers); 6 parameters" in analyze(MODELS / "gan.yaml", "--structural")


def test_instances_share_a_row_only_when_their_notes_say_the_same(write_model):
    # Each block stops its own input: block.0 is partly cut by the stops of blocks 1 and 2,
    # block.1 by block 2's alone. One row with block.0's note would be wrong for block.1.
    path = write_model(REPEATED.replace("tanh(h @ w)", "stop_gradient(h) + tanh(h @ w)").replace(
        "times=12", "times=3").replace("sum(stop_gradient(h) @ head) + sum(h)", "sum(h @ head)"))
    out = analyze(path)
    assert "block.{" not in out
    rows = {line.split()[0]: line.split()[-1] for line in out.splitlines() if line.startswith("block.")}
    notes = dict(line.split(" ", 1) for line in out.splitlines() if line.startswith("["))
    # one repeated line's stops are named together: "stop_gradient in block.1.y and block.2.y (line 11:10)"
    assert notes[rows["block.0.w"].lstrip("~")].endswith("stop_gradient in block.1.y and block.2.y (line 11:10)")
    assert notes[rows["block.1.w"].lstrip("~")].endswith("stop_gradient in block.2.y (line 11:10)")
    assert rows["block.2.w"] != rows["block.1.w"]


def test_a_frozen_parameter_says_so_in_the_table_markdown_and_why():
    # Its gradient flows, and trains nothing: without the mark the verdict's count looks wrong.
    model = MODELS / "frozen_pretrained_encoder.yaml"
    rows = {line.split()[0]: line for line in analyze(model).splitlines() if line.startswith(("encoder.", "head."))}
    assert rows["encoder.w1"].startswith("encoder.w1 (frozen)   [6, 5]   flows ")
    assert "(frozen)" not in rows["head.w"]
    markdown = CliRunner().invoke(cli, ["analyze", str(model), "--format", "markdown"]).stdout
    assert "| `encoder.w1` *(frozen)* | [6, 5] | flows " in markdown and "`head.w` |" in markdown
    why = CliRunner().invoke(cli, ["why", str(model), "encoder.w1"]).stdout
    assert why.startswith("encoder.w1 (frozen) -> loss: flows")
    assert CliRunner().invoke(cli, ["why", str(model), "head.w"]).stdout.startswith("head.w -> loss: flows")


def test_a_leak_is_drawn_in_alarm_red_not_the_green_of_a_healthy_flow():
    from gradflow.analysis.report import Pair
    from gradflow.cli.render.table import Notes, cell
    flows = Pair("flows", 0.5, 0.5, 0.0, 0)
    assert cell([flows], "problem", Notes()).style == "red"
    assert cell([flows], "ok", Notes()).style == "green"


# A long parameter name and a long loss name: no table of even one loss fits 60 columns.
LONG_NAMES = """
gradflow: 1
inputs:
  x: {shape: [4, 8]}
params:
  encoder.layers.0.self_attention.query.weight: {shape: [8, 8]}
  decoder.out: {shape: [8, 8]}
graph:
  h: tanh(x @ encoder.layers.0.self_attention.query.weight)
  y: h @ decoder.out
  reconstruction_loss_with_perceptual_term: mean(square(y))
  kl: mean(square(stop_gradient(h)))
losses: [reconstruction_loss_with_perceptual_term, kl]
"""
TERMINAL = {"FORCE_COLOR": "1", "NO_COLOR": "1", "TERM": "xterm"}


def on_terminal(columns: int, *args) -> str:
    return CliRunner().invoke(cli, ["analyze", *map(str, args)], env={"COLUMNS": str(columns), **TERMINAL}).output


def test_a_terminal_too_narrow_for_a_table_of_one_loss_gets_a_record_per_parameter(write_model):
    path = write_model(LONG_NAMES)
    out = on_terminal(80, path)
    table = out.split("numeric, seed 0; 2 parameters, 128 values; 11 nodes\n")[1].split("cells:")[0]
    assert table.splitlines() == [
        "loss value",
        "  reconstruction_loss_with_perceptual_term  0.267",
        "  kl                                        0.268",
        "encoder.layers.0.self_attention.query.weight  [8, 8]",
        "  reconstruction_loss_with_perceptual_term  flows 0.563",
        "  kl                                        blocked [1] (intended)",
        "decoder.out  [8, 8]",
        "  reconstruction_loss_with_perceptual_term  flows 0.359",
        "  kl                                        unreachable",
    ]
    assert all(len(line) <= 80 for line in out.splitlines() if ": error: " not in line)   # a finding is a line
    assert "─" not in out and "\n──────" in analyze(path)     # a pipe still gets the table, whole lines


def test_records_on_a_terminal_too_narrow_for_aligned_cells_wrap_each_line_within_it(write_model):
    path = write_model(LONG_NAMES)
    out = on_terminal(44, path)
    lines = out.split(" nodes\n")[1].split("cells:")[0].splitlines()
    assert all(len(line) <= 44 for line in lines) and [line for line in lines if line != line.rstrip()] == []
    assert "  kl  blocked [1] (intended)" in lines and "  reconstruction_loss_with_perceptual_term" in lines
    assert lines.count("    flows 0.563") == 1


def test_a_table_of_one_loss_that_fits_a_terminal_stays_a_table():
    out = on_terminal(40, MODELS / "actor_critic.yaml")
    assert "parameter    shape" in out and "actor.w      [8, 4]    flows 0.48" in out
