"""The command line through click's CliRunner: outputs, formats and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from gradflow.cli.main import cli
from tests.conftest import MODELS, ROOT

TAPE = str(MODELS / "stop_gradient_tape.yaml")


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_analyze_json_reports_tape_example():
    result = run("analyze", TAPE, "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    x, y = doc["params"]
    assert x["name"] == "x" and x["grads"]["z"]["status"] == "flows"
    assert x["grads"]["z"]["norm"] == pytest.approx(7.0)
    assert y["grads"]["z"]["status"] == "blocked"
    [cut] = y["grads"]["z"]["cut_by"]
    assert cut == {"node": "z", "op": "stop_gradient", "kind": "explicit", "file": str(TAPE),
                   "line": 12, "col": 14}
    assert doc["losses"] == [{"name": "z", "value": pytest.approx(10.0), "line": 14, "wrt": ["x"]}]
    assert doc["summary"] == {"errors": 0, "warnings": 0}


def test_analyze_json_has_every_section_of_the_document():
    doc = json.loads(run("analyze", TAPE, "--format", "json").stdout)
    assert list(doc) == ["format", "gradflow_version", "model", "losses", "params", "stops",
                         "findings", "summary"]
    assert doc["model"]["mode"] == "numeric" and doc["model"]["param_count"] == 2
    [stop] = doc["stops"]
    assert stop["cuts"]["z"] == {"blocks": ["y"], "partial": [], "cut_norm": pytest.approx(2.0)}
    assert stop["redundant"] is False


def test_analyze_table_names_the_cut():
    result = run("analyze", TAPE)
    assert result.exit_code == 0
    assert "flows 7" in result.output
    assert "blocked [1]" in result.output
    assert "[1] blocked by stop_gradient in z (line 12:14)" in result.output
    assert "\x1b[" not in result.output   # not a terminal: no ANSI codes


def test_analyze_weights_load_values_by_name(tmp_path):
    weights = tmp_path / "w.npz"
    np.savez(weights, x=np.array(5.0), y=np.array(1.0))
    doc = json.loads(run("analyze", TAPE, "--format", "json", "--weights", str(weights)).stdout)
    assert doc["params"][0]["grads"]["z"]["norm"] == pytest.approx(2 * 5.0 + 1.0)


def test_analyze_header_counts_in_words_that_agree(write_model):
    path = write_model("gradflow: 1\nparams:\n  w: {value: 2.0}\ngraph:\n  loss: w * w\nlosses: [loss]\n")
    assert "numeric, seed 0; 1 parameter, 1 value; 2 nodes\n" in run("analyze", path).stdout
    assert "; 6 parameters, 176 values; 37 nodes\n" in run("analyze", str(MODELS / "gan.yaml")).stdout


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_check_and_why_take_weights_too(tmp_path, jobs):
    weights = tmp_path / "w.npz"
    np.savez(weights, x=np.array(5.0), y=np.array(1.0))
    copy = tmp_path / "tape.yaml"
    copy.write_text(Path(TAPE).read_text())
    doc = json.loads(run("check", TAPE, str(copy), "-j", jobs, "--format", "json", "--weights", str(weights)).stdout)
    assert [f["params"][0]["grads"]["z"]["norm"] for f in doc["files"]] == [pytest.approx(2 * 5.0 + 1.0)] * 2
    assert run("why", TAPE, "x", "--weights", str(weights)).exit_code == 0
    np.savez(weights, x=np.zeros(3))
    result = run("check", TAPE, "--weights", str(weights))
    assert result.exit_code == 2 and "stop_gradient_tape.yaml:9:3: error: weights 'x'" in result.stderr


def test_check_with_an_archive_no_model_can_read_says_so_once(tmp_path):
    junk = tmp_path / "w.npz"
    junk.write_text("not a zip")
    result = run("check", str(MODELS), "--weights", str(junk))
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("error:") == 1 and f"{junk}:1:1: error: cannot read weights: " in result.stderr


def test_analyze_weights_shape_mismatch_is_an_input_error(tmp_path):
    weights = tmp_path / "w.npz"
    np.savez(weights, x=np.zeros(3))
    result = run("analyze", TAPE, "--weights", str(weights))
    assert result.exit_code == 2
    assert "stop_gradient_tape.yaml:9:3: error: weights 'x'" in result.stderr
    assert "shape [3]" in result.stderr and "Traceback" not in result.output


def test_analyze_weights_unknown_key_is_a_warning(tmp_path):
    weights = tmp_path / "w.npz"
    np.savez(weights, nothing=np.zeros(3))
    result = run("analyze", TAPE, "--format", "json", "--weights", str(weights))
    assert result.exit_code == 0
    assert "'nothing' names no parameter" in result.stderr
    json.loads(result.stdout)


def test_analyze_save_grads_writes_loss_param_arrays(tmp_path):
    out = tmp_path / "g.npz"
    assert run("analyze", TAPE, "--save-grads", str(out)).exit_code == 0
    with np.load(out) as saved:
        assert sorted(saved.files) == ["z/x"]     # y is blocked: no array for it
        assert float(saved["z/x"]) == pytest.approx(7.0)


def test_check_shipped_models_pass():
    result = run("check", str(MODELS))
    assert result.exit_code == 0, result.output
    assert "ok" in result.output


def test_check_flipped_expectation_fails_with_exit_1(write_model):
    text = (MODELS / "stop_gradient_tape.yaml").read_text().replace("flows: [x]", "flows: [x, y]")
    path = write_model(text)
    result = run("check", path)
    assert result.exit_code == 1
    assert ":17:16: error: expected z to train y, but stop_gradient in z" in result.output
    assert "[GF100]" in result.output


def test_check_missing_file_exits_2():
    result = run("check", "no/such/model.yaml")
    assert result.exit_code == 2
    assert result.stderr.startswith("no/such/model.yaml:1:1: error:")


def test_check_invalid_model_exits_2_with_one_located_line(write_model):
    path = write_model("""
        gradflow: 1
        params:
          w: {shape: [3]}
        graph:
          z: sum(relux(w))
        losses: [z]
    """)
    result = run("check", path)
    assert result.exit_code == 2
    assert result.stderr == f"{path}:5:10: error: unknown op 'relux' (did you mean 'relu'?)\n"
    assert result.stdout == "1 model checked: 1 invalid (1 error, 0 warnings)\n"


def test_check_directory_skips_yaml_that_is_not_a_model(tmp_path, write_model):
    write_model("just: some config\n", "config.yaml")
    write_model((MODELS / "stop_gradient_tape.yaml").read_text(), "m.yml")
    result = run("check", str(tmp_path), "--format", "json")
    doc = json.loads(result.stdout)
    assert [f["model"]["name"] for f in doc["files"]] == ["stop_gradient_tape"]


def test_check_json_is_one_document_with_summary():
    result = run("check", TAPE, "--format", "json")
    doc = json.loads(result.stdout)
    assert doc["format"] == 1 and len(doc["files"]) == 1
    assert doc["summary"]["errors"] == 0 and doc["summary"]["files"] == 1


def test_check_github_format_prints_workflow_commands(write_model):
    path = write_model((MODELS / "stop_gradient_tape.yaml").read_text().replace("flows: [x]", "flows: [y]"))
    result = run("check", path, "--format", "github")
    assert result.exit_code == 1
    assert result.output.startswith(f"::error file={path},line=17,col=13,title=GF100::")


def test_version_prints_the_package_version():
    import gradflow
    assert run("--version").output.strip() == f"gradflow, version {gradflow.__version__}"


def test_ops_lists_every_op():
    from gradflow.engine import OPS
    out = run("ops").output
    for name, op in OPS.items():
        assert f"  {name}(" in out, name


def test_analyze_structural_gives_statuses_without_numbers():
    doc = json.loads(run("analyze", TAPE, "--structural", "--format", "json").stdout)
    assert doc["model"]["mode"] == "structural"
    pair = doc["params"][1]["grads"]["z"]
    assert pair["status"] == "blocked" and pair["norm"] is None


def test_analyze_max_memory_refuses_a_large_numeric_run():
    result = run("analyze", str(MODELS / "transformer.yaml"), "--max-memory", "1KiB")
    assert result.exit_code == 2
    assert "transformer.yaml:52:7: error: a numeric run needs about 654 KiB, more than the limit of 1 KiB" \
        in result.stderr
    assert "(its largest tensor is block.0.w1 [16, 64], made on this line)" in result.stderr
    assert "use --structural, or smaller dims with --dim NAME=INT (or raise --max-memory)" in result.stderr
    decimal = run("analyze", str(MODELS / "transformer.yaml"), "--max-memory", "1KB")
    assert "more than the limit of 1000 B (" in decimal.stderr          # not '1e+03 B'


def test_analyze_max_memory_of_a_file_without_dims_suggests_smaller_shapes_not_dim(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("gradflow: 1\nparams:\n  w: {shape: [64, 64]}\ngraph:\n  loss: sum(w)\nlosses: [loss]\n")
    result = run("analyze", str(path), "--max-memory", "1KiB")
    assert result.exit_code == 2
    assert "use --structural, or smaller shapes in the file (or raise --max-memory)" in result.stderr


@pytest.mark.parametrize("given", ["0", "0KB", "0.0GiB", "1e400"])
def test_max_memory_of_nothing_or_infinity_is_named_as_written(given):
    result = run("analyze", str(MODELS / "gan.yaml"), "--max-memory", given)
    assert result.exit_code == 2
    assert f"SIZE must be a finite size above zero such as 512MiB or 2GB, not '{given}'" in result.stderr


@pytest.mark.parametrize("digits", ["9" * 19, "-" + "9" * 19, "9" * 5000])
def test_dim_with_too_many_digits_says_so(digits):
    result = run("analyze", str(MODELS / "gan.yaml"), "--dim", f"batch={digits}")
    assert result.exit_code == 2
    assert f"Invalid value for '--dim': batch has {len(digits.lstrip('-')):,} digits; a dim has at most 18\n" \
        in result.stderr
    assert run("analyze", str(MODELS / "gan.yaml"), "--dim", "batch=" + "0" * 30 + "4").exit_code == 0


def test_analyze_dim_and_seed_flags(tmp_path):
    a = json.loads(run("analyze", str(MODELS / "vae.yaml"), "--format", "json", "--dim", "batch=3",
                       "--seed", "5").stdout)
    b = json.loads(run("analyze", str(MODELS / "vae.yaml"), "--format", "json", "--dim", "batch=3",
                       "--seed", "6").stdout)
    assert a["model"]["dims"]["batch"] == 3 and a["model"]["seed"] == 5
    assert a["losses"][0]["value"] != b["losses"][0]["value"]


def test_analyze_bad_dim_flag_is_a_usage_error():
    result = run("analyze", TAPE, "--dim", "batch")
    assert result.exit_code == 2 and "expected NAME=INT," in result.output


def test_analyze_weights_also_set_inputs(tmp_path):
    weights = tmp_path / "w.npz"
    np.savez(weights, x=np.zeros((8, 16)), w=np.ones((16, 5)))
    doc = json.loads(run("analyze", str(MODELS / "stable_softmax.yaml"), "--format", "json",
                         "--weights", str(weights)).stdout)
    # A zero input makes every logit equal to b (zeros): the loss is log(5) times the label mass.
    w = doc["params"][0]["grads"]["loss"]
    assert w["status"] == "zero" and w["dies_at"][0]["op"] == "matmul"


def test_analyze_weights_dtype_mismatch_is_an_input_error(tmp_path):
    weights = tmp_path / "w.npz"
    np.savez(weights, action=np.zeros(32, dtype=np.float64))
    result = run("analyze", str(MODELS / "actor_critic.yaml"), "--weights", str(weights))
    assert result.exit_code == 2
    assert "actor_critic.yaml:16:3: error: weights 'action'" in result.stderr and "dtype" in result.stderr


def test_analyze_weights_unreadable_file_is_an_input_error(tmp_path):
    bad = tmp_path / "w.npz"
    bad.write_bytes(b"not a zip")
    result = run("analyze", TAPE, "--weights", str(bad))
    assert result.exit_code == 2 and result.stderr.startswith(f"{bad}:1:1: error: cannot read weights")


def test_analyze_unknown_loss_flag_is_an_input_error():
    result = run("analyze", TAPE, "--loss", "nope")
    assert result.exit_code == 2
    # at the model's losses (line 14 declares z), not at line 1, which has nothing to do with it
    assert result.stderr == f"{TAPE}:14:3: error: --loss nope: the model has no loss 'nope' (it has z)\n"


# rich draws for a terminal without colour codes, and not a dumb one (which rich holds to 80 columns)
TERMINAL = {"FORCE_COLOR": "1", "NO_COLOR": "1", "TERM": "xterm"}


def test_analyze_table_in_a_narrow_terminal_splits_losses_instead_of_breaking_words(monkeypatch):
    monkeypatch.chdir(ROOT)      # the header's path as a user types it: a checkout's depth must not matter
    out = CliRunner().invoke(cli, ["analyze", "models/vq_vae.yaml"], env={"COLUMNS": "50", **TERMINAL}).output
    assert all(len(line) <= 50 for line in out.splitlines())
    assert out.count("parameter    shape") >= 2
    for loss in ("loss", "recon_loss", "codebook_loss", "commit_loss"):
        assert f" {loss} " in out or out.rstrip().endswith(loss) or f" {loss}\n" in out
    assert out.count("unreachable") == 2
    wide = CliRunner().invoke(cli, ["analyze", str(MODELS / "vq_vae.yaml")], env={"COLUMNS": "80", **TERMINAL}).output
    assert wide.count("parameter    shape") < out.count("parameter    shape")


def test_analyze_table_too_narrow_for_one_loss_wraps_its_cells_and_cuts_no_name_or_shape(monkeypatch):
    monkeypatch.chdir(ROOT)
    out = CliRunner().invoke(cli, ["analyze", "models/actor_critic.yaml"], env={"COLUMNS": "40", **TERMINAL}).output
    assert all(len(line) <= 40 for line in out.splitlines())
    assert "…" not in out
    for name, shape in (("critic.w1", "[8, 64]"), ("critic.w2", "[64, 1]"), ("actor.w", "[8, 4]")):
        assert out.count(f"{name}    ") == 2 and out.count(f"   {shape}   ") == 2, name
    assert out.count("(intended)") == 3      # each on the line below its "blocked [1]"


def test_analyze_in_a_narrow_terminal_wraps_a_norm_range_whole_never_inside_it(monkeypatch):
    monkeypatch.chdir(ROOT)
    out = CliRunner().invoke(cli, ["analyze", "models/transformer.yaml"], env={"COLUMNS": "50", **TERMINAL}).output
    piped = CliRunner().invoke(cli, ["analyze", "models/transformer.yaml"]).output    # whole lines

    def numbers(text):       # of the table below the header: none cut, as '0.0213..0.03' and '35'
        body = text.split("nodes\n", 1)[1].split("cells:")[0]
        return [token for token in body.split() if token[0].isdigit() and not token.endswith("]")]
    assert numbers(out) == numbers(piped) and sum(".." in token for token in numbers(out)) >= 10
    assert all(len(line) <= 50 for line in out.split("nodes\n", 1)[1].splitlines())   # a record per row


def test_analyze_in_a_terminal_prints_each_finding_as_one_line_so_its_command_copies_whole(monkeypatch):
    monkeypatch.chdir(ROOT)
    bug = "tests/models/bugs/gan_stopped_discriminator_output.yaml"
    out = CliRunner().invoke(cli, ["analyze", bug], env={"COLUMNS": "80", **TERMINAL}).output
    findings = [line for line in out.splitlines() if line.startswith(bug + ":") and ": error: " in line]
    assert findings and all(line.endswith("--loss g_loss") for line in findings if "[GF10" in line)
    assert f"see: gradflow why {bug} G.w1 --loss g_loss" in out


def test_a_dumb_terminal_keeps_its_columns_and_gets_no_colour(monkeypatch):
    # Emacs' shell says TERM=dumb and sets COLUMNS; rich alone would draw 80 columns there.
    monkeypatch.chdir(ROOT)
    out = CliRunner().invoke(cli, ["analyze", "models/actor_critic.yaml"],
                             env={"COLUMNS": "40", "FORCE_COLOR": "1", "TERM": "dumb"}).output
    assert all(len(line) <= 40 for line in out.splitlines()) and "\x1b[" not in out
    assert out.count("(intended)") == 3 and "critic.w1    [8, 64]" in out


@pytest.mark.parametrize("columns, shown", [("200", ["entries", "tape", "numeric"]), ("60", ["entries"]), ("40", [])])
def test_gradcheck_in_a_narrow_terminal_leaves_columns_out_and_cuts_no_number(columns, shown):
    out = CliRunner().invoke(cli, ["gradcheck", str(MODELS / "gan.yaml")], env={"COLUMNS": columns, **TERMINAL}).output
    assert all(len(line) <= int(columns) for line in out.splitlines())
    assert "…" not in out
    header = " ".join(line for line in out.split("─")[0].splitlines())
    assert [c for c in ("entries", "tape", "numeric") if c in header] == shown
    assert "max" in header and "|error|" in header and "result" in header
    rows = [line.split() for line in out.splitlines() if line.startswith(("d_loss ", "g_loss "))]
    assert f"{len(rows)} pairs compared: ok" in out and len(rows) > 5
    for row in rows:                  # every number whole: each parses, and the error is tiny
        assert float(row[3 if "entries" in shown else 2]) < 1e-6 and row[-1] == "ok"
        assert [float(cell) for cell in row[2:-1]]       # each parses: none is cut to "1.6e…"


def test_gradcheck_atol_is_an_option_and_without_it_a_vanishing_gradient_is_judged_too():
    # layer.0.w's gradient is ~1e-15 and its central difference ~1e-11: noise the default atol forgives.
    path = str(MODELS / "deep_sigmoid_vanishing.yaml")
    forgiving = CliRunner().invoke(cli, ["gradcheck", path, "--rtol", "1e-12"])
    assert forgiving.exit_code == 0 and "pairs compared: ok" in forgiving.output
    strict = CliRunner().invoke(cli, ["gradcheck", path, "--rtol", "1e-12", "--atol", "0"])
    assert strict.exit_code == 1
    assert any(line.startswith("loss   layer.0.w ") and "FAIL" in line for line in strict.output.splitlines())


def test_gradcheck_too_narrow_for_a_skip_reason_leaves_it_to_the_line_below():
    path = str(MODELS / "dann_grad_reverse.yaml")
    out = CliRunner().invoke(cli, ["gradcheck", path], env={"COLUMNS": "40", **TERMINAL}).output
    assert all(len(line) <= 40 for line in out.splitlines()) and "…" not in out
    assert "loss   features.w      -         skipped\n" in out
    assert "skipped: grad_reverse on the way" in out
    wide = CliRunner().invoke(cli, ["gradcheck", path], env={"COLUMNS": "60", **TERMINAL}).output
    assert "skipped: grad_reverse\n" in wide


def test_gradcheck_too_narrow_for_its_table_gets_a_record_per_pair():
    # policy_loss, parameter, max |error| and result need 42 columns: a record per pair, not a
    # table whose header and rule the terminal would wrap.
    out = CliRunner().invoke(cli, ["gradcheck", str(MODELS / "actor_critic.yaml")],
                             env={"COLUMNS": "40", **TERMINAL}).output
    lines = out.splitlines()
    assert all(len(line) <= 40 and line == line.rstrip() for line in lines) and "…" not in out and "─" not in out
    assert lines[0] == "actor.w" and lines[1] == "  loss         policy_loss" and lines[6] == "  result       ok"
    assert [line[2:13].rstrip() for line in lines[1:7]] == ["loss", "entries", "max |error|", "tape", "numeric", "result"]
    errors = [line.split()[-1] for line in lines if line.startswith("  max |error|  ")]
    assert len(errors) == 5 and all(float(e) < 1e-6 for e in errors) and lines[-1] == "5 pairs compared: ok"


def test_gradcheck_name_wider_than_the_terminal_stays_whole_on_a_line_of_its_own(write_model):
    long = "encoder.layers.3.attention.query_projection.weight"
    path = write_model(f"gradflow: 1\nparams:\n  {long}: {{shape: [3]}}\ngraph:\n  loss: sum(tanh({long}))\n"
                       "losses: [loss]\n")
    out = CliRunner().invoke(cli, ["gradcheck", path], env={"COLUMNS": "40", **TERMINAL}).output
    lines = out.splitlines()
    assert lines[:3] == [long, "  loss         loss", "  entries      3"] and "…" not in out
    assert all(len(line) <= 40 for line in lines[1:])


@pytest.mark.parametrize("columns", ["40", "80", "200"])
def test_analyze_in_a_pipe_is_one_table_of_whole_lines_without_trailing_blanks(columns):
    out = CliRunner().invoke(cli, ["analyze", str(MODELS / "vq_vae.yaml")], env={"COLUMNS": columns}).output
    assert out.count("parameter    shape") == 1
    assert all(line == line.rstrip() for line in out.splitlines())
    assert "codebook_loss" in out.splitlines()[3]        # every loss in the one header row


@pytest.mark.parametrize("columns", ["40", "80", "200"])
def test_names_are_never_split_at_any_width(write_model, columns):
    long = "encoder.layers.3.attention.query_projection.weight"
    path = write_model(f"gradflow: 1\nparams:\n  {long}: {{shape: [3]}}\n  v: {{shape: [3]}}\ngraph:\n"
                       f"  a: stop_gradient({long}) * v\n  loss: sum(a)\nlosses: [loss]\n")
    for env in ({"COLUMNS": columns, **TERMINAL}, {"COLUMNS": columns}):
        for command in (["analyze", path], ["why", path, long], ["check", path]):
            out = CliRunner().invoke(cli, command, env=env).output
            assert long in out, (command, env)


def test_ops_prints_signatures_and_docs_verbatim():
    out = run("ops").output
    assert "concat([xs], axis=0)" in out
    assert "x limited to [lo, hi] (either may be None)" in out
    assert out.count("(alias: detach)") == 1


def test_ops_documents_module_calls_and_repeat():
    out = run("ops").output
    assert "repeat(module, x, times=N, name=None)" in out and "MODULE(x, ...)" in out


def test_help_names_the_exit_codes():
    out = run("--help").output
    assert "Exit codes: 0 success" in out and "1 a check" in out and "2 usage error" in out and "130" in out


def test_check_on_a_narrow_terminal_breaks_no_line_the_summary_included(monkeypatch):
    # Findings are whole lines for grep and editors; the summary is a line like them.
    monkeypatch.chdir(ROOT)
    out = CliRunner().invoke(cli, ["check", "models/dead_relu.yaml"], env={"COLUMNS": "40", **TERMINAL}).output
    lines = out.splitlines()
    assert lines[-1] == "1 model checked: ok (0 errors, 2 warnings)"
    assert all(line.startswith("models/dead_relu.yaml") for line in lines[:-1])
