"""Rule settings: every layer checked where it is written, and the highest layer naming a rule wins."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

import gradflow
from gradflow.analysis import settings as settings_module
from gradflow.analysis.pyproject import may_hold_tool_gradflow
from gradflow.analysis.settings import Settings, settings_for
from gradflow.cli.main import cli
from gradflow.errors import ModelError

# w is trainable and blocked everywhere: GF102 (and GF103, GF110) fire.
BLOCKED = """
gradflow: 1
params:
  w: {shape: [3], init: ones}
graph:
  loss: sum(stop_gradient(w))
losses: [loss]
"""


def model_in(tmp_path, pyproject: str | None = None, check: str = ""):
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    path = tmp_path / "m.yaml"
    path.write_text(BLOCKED.lstrip() + check, encoding="utf-8")
    return gradflow.load(path)


def located(tmp_path, pyproject: str) -> ModelError:
    settings_module.read_pyproject.cache_clear()
    with pytest.raises(ModelError) as e:
        settings_for(model_in(tmp_path, pyproject))
    return e.value


@pytest.mark.parametrize("text, line, col, words", [
    ('[tool.gradflow]\nignore = ["GF1O2"]\n', 2, 1, "unknown rule id 'GF1O2' (did you mean 'GF102'?)"),
    ('[tool.gradflow]\nselect = ["GF999"]\n', 2, 1, "unknown rule id 'GF999'"),
    ('[tool.gradflow]\nstrictness = true\n', 2, 1, "unknown setting 'strictness' (did you mean 'strict'?)"),
    ('[tool.gradflow]\nstrict = "false"\n', 2, 1, "strict must be true or false"),
    ('[tool.gradflow]\nvanishing = -1.0\n', 2, 1, "vanishing must be a positive finite number"),
    ('[tool.gradflow]\nexploding = nan\n', 2, 1, "exploding must be a positive finite number"),
    ('[tool.gradflow]\nexploding = inf\n', 2, 1, "exploding must be a positive finite number"),
    ('[tool.gradflow]\nmax-memory = "lots"\n', 2, 1, "max-memory must be a size"),
    ('[tool.gradflow]\nmax-memory = true\n', 2, 1, "max-memory must be a number of bytes or a size such as 512MiB or 2GB, not true"),
    ('[tool.gradflow]\nvanishing = 1e-3\nexploding = 1e-5\n', 2, 1, "vanishing (0.001) must be below exploding (1e-05)"),
    ('[tool]\ngradflow = 3\n', 2, 1, "[tool.gradflow] must be a table"),
    ('tool = {gradflow = {select = ["GF999"]}}\n', 1, 21, "unknown rule id 'GF999'"),
    ('[tool]\ngradflow.strict = "yes"\n', 2, 10, "strict must be true or false"),
    ('name = "x"\n\ntool.gradflow.max-memory = "lots"\n', 3, 15, "max-memory must be a size"),
    ('[tool]\nselect = 1\ngradflow = {select = ["GF999"], strict = true}\n', 3, 13, "unknown rule id"),
    # the key written earlier in a string value or a comment is not the key
    ('tool.gradflow.strict = true  # select = 1\ntool.gradflow.select = ["GF999"]\n', 2, 15, "unknown rule id"),
    ('[tool]\nx = "gradflow = 3"\n# gradflow = 4\ngradflow = 3\n', 4, 1, "[tool.gradflow] must be a table"),
    ("[tool]\nx = '''\ngradflow.strict = 1\n'''\n'gradflow'.strict = \"yes\"\n", 5, 12, "strict must be true or false"),
    # nor is the table named earlier in a string, a comment or a key of another name
    ('[project]\ndescription = "set tool.gradflow options"\n[lint]\nselect = ["E"]\n[tool]\ngradflow = {select = ["GF999"]}\n',
     6, 13, "unknown rule id"),
    ('# [tool] below\n[lint]\ngradflow = 1\n[tool]\ngradflow = 3\n', 5, 1, "[tool.gradflow] must be a table"),
    ('"tool.gradflow" = 1\n[lint]\nselect = 1\n[tool]\ngradflow = {select = ["GF999"]}\n', 5, 13, "unknown rule id"),
    ('[tool.gradflow]\nselect = [\n', 2, 10, "not valid TOML"),
    ("[tool.gradflow]\nselect = " + "[" * 5000 + "]" * 5000 + "\n", 1, 1, "pyproject.toml"),
])
def test_pyproject_problem_is_located(tmp_path, text, line, col, words):
    error = located(tmp_path, text)
    assert words in error.message
    assert error.path.endswith("pyproject.toml")
    if "TOML" not in words:
        assert (error.line, error.col) == (line, col)


@pytest.mark.parametrize("text, line, col", [
    ('[tool.gradflow]\nignore = ["GF106"\n\n', 2, 18), ('[tool.gradflow]\nselect = [', 2, 11),
])
def test_toml_that_ends_too_soon_is_located_after_its_last_text(tmp_path, text, line, col):
    error = located(tmp_path, text)
    assert error.message.endswith("at the end of the file") and "document" not in error.message
    assert (error.line, error.col) == (line, col)


def test_a_pyproject_without_a_gradflow_table_is_not_parsed(tmp_path):
    settings_module.read_pyproject.cache_clear()
    assert settings_for(model_in(tmp_path, "[tool.other]\nx = [\n")).strict is False   # not ours to judge


SPELLINGS = ['[tool.gradflow]\nstrict = true\n', '[ tool . "gradflow" ]\nstrict = true\n',
             "['tool'.gradflow]\nstrict = true\n", 'tool.gradflow.strict = true\n', '[tool]\ngradflow.strict = true\n',
             '[ "tool" ]\ngradflow = {strict = true}\n', 'tool = {gradflow = {strict = true}}\n',
             '"t\\u006fol".gradflow.strict = true\n', '[project]\nname = "gradflow"\n[tool.gradflow]\nstrict = true\n',
             '[tool."gr\\u0061dflow"]\nstrict = true\n', '[tool]\n"gr\\U00000061dflow" = {strict = true}\n']


@pytest.mark.parametrize("text", SPELLINGS)
def test_every_spelling_of_the_gradflow_table_is_read(tmp_path, text):
    tomllib = pytest.importorskip("tomllib")
    assert tomllib.loads(text)["tool"]["gradflow"] == {"strict": True}
    assert may_hold_tool_gradflow(text)
    settings_module.read_pyproject.cache_clear()
    assert settings_for(model_in(tmp_path, text)).strict is True


@pytest.mark.parametrize("text", [
    '[project]\nname = "gradflow"\ndependencies = ["gradflow>=0.1"]\n[project.scripts]\ngradflow = "gradflow.cli:main"\n'
    '[tool.setuptools.dynamic]\nversion = {attr = "gradflow.__version__"}\n',
    '[project]\nname = "gradflow-demo"\n[tool.black]\nline-length = 100\n',
])
def test_a_pyproject_naming_gradflow_only_as_a_project_is_not_parsed(tmp_path, text):
    tomllib = pytest.importorskip("tomllib")
    assert "gradflow" not in tomllib.loads(text).get("tool", {})   # what parsing it would find
    assert not may_hold_tool_gradflow(text)
    settings_module.read_pyproject.cache_clear()
    assert settings_for(model_in(tmp_path, text + "[tool.other]\nx = [\n")).strict is False   # not ours to judge


def test_a_pyproject_read_for_its_escapes_alone_is_not_judged(tmp_path):
    # \\u may spell gradflow, so the file is parsed; invalid, it still is not ours to judge.
    text = '[project]\ndescription = "caf\\u00e9"\n[tool.other]\nx = [\n'
    assert may_hold_tool_gradflow(text)
    settings_module.read_pyproject.cache_clear()
    assert settings_for(model_in(tmp_path, text)).strict is False


def test_a_bad_setting_in_an_escaped_gradflow_table_is_an_error(tmp_path):
    error = located(tmp_path, '[tool."gr\\u0061dflow"]\nselect = ["GF999"]\n')
    assert "unknown rule id" in error.message and (error.line, error.col) == (2, 1)


def test_a_folder_named_pyproject_toml_is_not_read(tmp_path):
    (tmp_path / "pyproject.toml").mkdir()   # not a file: skipped, like no pyproject at all
    assert settings_for(model_in(tmp_path)).strict is False


def test_check_block_rule_id_is_located_at_the_item(tmp_path):
    settings_module.read_pyproject.cache_clear()
    model = model_in(tmp_path, check="check:\n  ignore: [GF107, GF12]\n")
    with pytest.raises(ModelError) as e:
        settings_for(model)
    assert "unknown rule id 'GF12'" in e.value.message and (e.value.line, e.value.col) == (8, 19)


def test_check_block_thresholds_may_be_written_as_toml_writes_them(tmp_path):
    # rules.md's pyproject example writes vanishing = 1e-9; the same in check: is a number too.
    settings_module.read_pyproject.cache_clear()
    model = model_in(tmp_path, check="check:\n  vanishing: 1e-9\n  exploding: 1e5\n")
    settings = settings_for(model)
    assert (settings.vanishing, settings.exploding) == (1e-9, 1e5)


def test_command_line_select_beats_pyproject_ignore(tmp_path):
    settings_module.read_pyproject.cache_clear()
    model = model_in(tmp_path, '[tool.gradflow]\nignore = ["GF102"]\n')
    assert settings_for(model).severity("GF102") == "off"
    assert settings_for(model, {"select": "GF102"}).severity("GF102") == "error"


def test_check_block_select_beats_pyproject_ignore_and_cli_ignore_beats_both(tmp_path):
    settings_module.read_pyproject.cache_clear()
    model = model_in(tmp_path, '[tool.gradflow]\nignore = ["GF102"]\n', check="check:\n  select: [GF102]\n")
    assert settings_for(model).severity("GF102") == "error"
    assert settings_for(model, {"ignore": "GF102"}).severity("GF102") == "off"


def test_a_rule_both_selected_and_ignored_in_one_layer_is_an_error(tmp_path):
    error = located(tmp_path, '[tool.gradflow]\nselect = ["GF102"]\nignore = ["GF102"]\n')
    assert "both selected and ignored" in error.message


def test_pyproject_is_read_once_for_many_models(tmp_path, monkeypatch):
    settings_module.read_pyproject.cache_clear()
    (tmp_path / "pyproject.toml").write_text('[tool.gradflow]\nexploding = 5.0\n')
    reads = []
    real = settings_module.tool_table
    monkeypatch.setattr(settings_module, "tool_table", lambda *a: reads.append(a) or real(*a))
    for i in range(5):
        (tmp_path / f"m{i}.yaml").write_text(BLOCKED.lstrip())
    result = CliRunner().invoke(cli, ["check", str(tmp_path)])
    assert result.exit_code == 1 and "5 models checked" in result.output
    assert len(reads) == 1


def test_check_cli_reports_a_pyproject_error_as_one_located_line(tmp_path):
    settings_module.read_pyproject.cache_clear()
    model_in(tmp_path, '[tool.gradflow]\nignore = ["GF1O2"]\n')
    result = CliRunner().invoke(cli, ["check", str(tmp_path / "m.yaml")])
    assert result.exit_code == 2
    assert result.stderr.strip().endswith("pyproject.toml:2:1: error: ignore: unknown rule id 'GF1O2' "
                                          "(did you mean 'GF102'?)")


def test_settings_compare_and_hash_by_their_values():
    strict = Settings(strict=True)
    assert Settings(strict=True) == strict and hash(Settings(strict=True)) == hash(strict)
    assert len({Settings(), strict, Settings(strict=True)}) == 2


def test_a_bad_pyproject_is_one_error_named_as_the_user_would_however_many_models_it_spoils(tmp_path, monkeypatch):
    settings_module.read_pyproject.cache_clear()
    model_in(tmp_path, "[tool.gradflow]\nvanishing = -1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "n.yaml").write_text(BLOCKED.lstrip(), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["check", "."])
    assert result.exit_code == 2
    assert result.stderr == "pyproject.toml:2:1: error: vanishing must be a positive finite number, got -1\n"
    assert result.stdout == "2 models checked: 2 invalid (2 errors, 0 warnings)\n"
    github = CliRunner().invoke(cli, ["check", ".", "--format", "github"]).stdout
    assert github == ("::error file=pyproject.toml,line=2,col=1,title=invalid model::vanishing must be a positive "
                      "finite number, got -1\n")


def crossing(tmp_path, monkeypatch, pyproject: str | None, check: str) -> ModelError:
    settings_module.read_pyproject.cache_clear()
    monkeypatch.chdir(tmp_path)   # where the user would name pyproject.toml from
    with pytest.raises(ModelError) as e:
        settings_for(model_in(tmp_path, pyproject, check))
    return e.value


def test_thresholds_crossing_across_pyproject_and_check_block_are_an_error_at_the_check_block(tmp_path, monkeypatch):
    error = crossing(tmp_path, monkeypatch, "[tool.gradflow]\nstrict = false\nvanishing = 1e-2\n",
                     "check:\n  exploding: 1e-3\n")
    assert error.path.endswith("m.yaml") and (error.line, error.col) == (8, 14)
    assert error.message == "exploding (0.001) must be above vanishing (0.01, from pyproject.toml:3:1)"


def test_a_check_block_vanishing_not_below_the_default_exploding_is_an_error(tmp_path, monkeypatch):
    error = crossing(tmp_path, monkeypatch, None, "check:\n  strict: true\n  vanishing: 5000\n")
    assert error.path.endswith("m.yaml") and (error.line, error.col) == (9, 14)
    assert error.message == "vanishing (5000.0) must be below exploding (1000.0, the default)"


def test_thresholds_equal_across_layers_are_an_error_too(tmp_path, monkeypatch):
    error = crossing(tmp_path, monkeypatch, "[tool.gradflow]\nexploding = 0.5\n", "check:\n  vanishing: 0.5\n")
    assert error.message == "vanishing (0.5) must be below exploding (0.5, from pyproject.toml:2:1)"


def test_a_pyproject_vanishing_not_below_the_default_exploding_spoils_each_model_that_keeps_it(tmp_path, monkeypatch):
    settings_module.read_pyproject.cache_clear()
    model_in(tmp_path, "[tool.gradflow]\nvanishing = 5000\n")
    (tmp_path / "fixed.yaml").write_text(BLOCKED.lstrip() + "check:\n  exploding: 1e4\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "n.yaml").write_text(BLOCKED.lstrip(), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["check", ".", "--format", "json"])
    assert result.exit_code == 2
    assert result.stderr == ("pyproject.toml:2:1: error: vanishing (5000.0) must be below exploding "
                             "(1000.0, the default)\n")
    files = {f["model"]["path"]: f for f in json.loads(result.stdout)["files"]}
    assert [path for path, f in sorted(files.items()) if "error" in f] == ["./m.yaml", "./sub/n.yaml"]
    assert files["./fixed.yaml"]["findings"]   # its own exploding lifts the pair: checked as usual


def test_check_reports_thresholds_crossing_across_layers_as_one_located_line_and_checks_the_others(tmp_path):
    settings_module.read_pyproject.cache_clear()
    model_in(tmp_path, "[tool.gradflow]\nvanishing = 1e-2\n", "check:\n  exploding: 1e-3\n")
    (tmp_path / "ok.yaml").write_text(BLOCKED.lstrip(), encoding="utf-8")
    result = CliRunner().invoke(cli, ["check", str(tmp_path / "m.yaml"), str(tmp_path / "ok.yaml")])
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert re.fullmatch(r".*m\.yaml:8:14: error: exploding \(0\.001\) must be above vanishing "
                        r"\(0\.01, from .*pyproject\.toml:2:1\)", line)
    assert "2 models checked: 1 failed, 1 invalid" in result.stdout


def test_settings_given_to_the_api_that_cross_the_model_file_are_a_value_error(tmp_path):
    # The command line has no threshold flags; the API's settings are the layer above check:.
    settings_module.read_pyproject.cache_clear()
    model = model_in(tmp_path, check="check:\n  exploding: 1e-3\n")
    words = r"^vanishing \(1\.0\) must be below exploding \(0\.001, from .*m\.yaml:8:14\)$"
    with pytest.raises(ValueError, match=words):
        gradflow.analyze(model, settings={"vanishing": 1.0})
    assert not any(p.opts[0] in ("--vanishing", "--exploding") for p in cli.get_command(None, "check").params)


def test_thresholds_that_are_in_order_once_merged_are_taken_whatever_each_layer_says_alone(tmp_path):
    settings_module.read_pyproject.cache_clear()
    model = model_in(tmp_path, "[tool.gradflow]\nvanishing = 1e-2\n", "check:\n  exploding: 1.0\n")
    assert (settings_for(model).vanishing, settings_for(model).exploding) == (1e-2, 1.0)
    # pyproject's 5000 would cross the default exploding, but this model lifts it
    settings_module.read_pyproject.cache_clear()
    model = model_in(tmp_path, "[tool.gradflow]\nvanishing = 5000\n", "check:\n  exploding: 1e4\n")
    assert (settings_for(model).vanishing, settings_for(model).exploding) == (5000.0, 1e4)
    assert settings_for(model, {"exploding": 1e5}).exploding == 1e5
