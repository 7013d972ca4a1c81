"""`gradflow check`: strict, parallel jobs, colour and the CI output formats."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from gradflow.cli.main import cli
from gradflow.cli.render import FORMATS, MODULES, SHOW_COUNTERFACTUALS
from gradflow.cli.run import check_one
from tests.conftest import MODELS, ROOT

BUG = str(ROOT / "tests/models/bugs/gan_stopped_discriminator_output.yaml")
WARN = """
gradflow: 1
params:
  w: {shape: [3], init: ones}
  v: {shape: [3], init: ones}
graph:
  loss: sum(relu(-w) * v) + sum(v)
losses: [loss]
expect:
  loss: {zero: [w]}
"""


def run(*args, env=None):
    return CliRunner().invoke(cli, list(args), env=env)


def test_check_warnings_pass_unless_strict(write_model):
    path = write_model(WARN)
    assert run("check", path).exit_code == 0
    assert run("check", path, "--strict").exit_code == 1


def test_check_strict_from_the_file(write_model):
    assert run("check", write_model(WARN + "check:\n  strict: true\n")).exit_code == 1


def test_check_text_summary_counts_failed_and_invalid_models_apart_as_json_does():
    invalid = str(ROOT / "tests/models/invalid/clip_bound_not_a_number.yaml")
    paths = [BUG, str(MODELS / "gan.yaml"), invalid]
    summary = json.loads(run("check", *paths, "--format", "json").stdout)["summary"]
    assert (summary["failed"], summary["invalid"], summary["errors"]) == (1, 1, 5)
    text = run("check", *paths)
    assert text.exit_code == 2
    assert text.stdout.splitlines()[-1] == "3 models checked: 1 failed, 1 invalid (5 errors, 0 warnings)"


def test_check_parallel_jobs_give_the_same_result():
    one = json.loads(run("check", str(MODELS), "--format", "json").stdout)
    two = json.loads(run("check", str(MODELS), "--format", "json", "-j", "2").stdout)
    assert one == two and one["summary"]["files"] == len(list(MODELS.glob("*.yaml")))


def test_check_junit_has_one_testcase_per_model_and_rule():
    root = ET.fromstring(run("check", BUG, str(MODELS / "gan.yaml"), "--format", "junit").stdout)
    suites = root.findall("testsuite")
    assert [len(s.findall("testcase")) for s in suites] == [11, 11]
    failed = [c.get("name").split()[0] for c in suites[0].findall("testcase") if c.find("failure") is not None]
    assert failed == ["GF100", "GF102", "GF103", "GF110"]
    assert suites[1].get("failures") == "0"


def test_check_junit_reports_an_ignored_rule_as_skipped_not_passed():
    root = ET.fromstring(run("check", BUG, "--ignore", "GF103", "--format", "junit").stdout)
    [suite] = root.findall("testsuite")
    skipped = [c.get("name").split()[0] for c in suite.findall("testcase") if c.find("skipped") is not None]
    failed = [c.get("name").split()[0] for c in suite.findall("testcase") if c.find("failure") is not None]
    assert skipped == ["GF103"] and failed == ["GF100", "GF102", "GF110"]
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("11", "3", "1")


def test_check_junit_counts_an_invalid_model_as_an_error_and_totals_every_suite():
    # Consumers trust the attributes: an <error> element is counted under errors, not failures.
    invalid = str(ROOT / "tests/models/invalid/clip_bound_not_a_number.yaml")
    root = ET.fromstring(run("check", invalid, BUG, "--format", "junit").stdout)
    bad, bug = root.findall("testsuite")
    assert [bad.get(k) for k in ("tests", "failures", "errors", "skipped")] == ["1", "0", "1", "0"]
    assert bad.find("testcase/error") is not None
    assert [bug.get(k) for k in ("tests", "failures", "errors", "skipped")] == ["11", "4", "0", "0"]
    assert [root.get(k) for k in ("tests", "failures", "errors", "skipped")] == ["12", "4", "1", "0"]


def test_check_sarif_lists_results_with_regions():
    doc = json.loads(run("check", BUG, "--format", "sarif").stdout)
    assert doc["version"] == "2.1.0"
    results = doc["runs"][0]["results"]
    assert {r["ruleId"] for r in results} == {"GF100", "GF102", "GF103", "GF110"}
    region = results[0]["locations"][0]["physicalLocation"]["region"]
    assert region["startLine"] > 0 and region["startColumn"] > 0


def test_check_sarif_describes_every_rule_its_results_name_the_invalid_model_error_too():
    invalid = str(ROOT / "tests/models/invalid/clip_bound_not_a_number.yaml")
    [sarif_run] = json.loads(run("check", BUG, invalid, "--format", "sarif").stdout)["runs"]
    named = {r["ruleId"] for r in sarif_run["results"]}
    assert "invalid-model" in named and named <= {rule["id"] for rule in sarif_run["tool"]["driver"]["rules"]}


def test_check_markdown_has_a_table_per_model_with_intent_and_verdict_as_the_table_has():
    invalid = str(ROOT / "tests/models/invalid/clip_bound_not_a_number.yaml")
    out = run("check", BUG, str(MODELS / "gan.yaml"), invalid, "--format", "markdown").stdout
    assert "| `G.w1` | [4, 16] | blocked (`stop_gradient` in `d_fake` L45) *(intended)* | blocked (" in out
    assert out.count("*(intended)*") == 6        # d_loss blocks G on purpose, in both files
    ac = run("check", str(MODELS / "actor_critic.yaml"), "--format", "markdown").stdout
    assert "| `actor.w` | [8, 4] | flows 0.48 | unreachable |" in ac    # no path at all: no word
    assert out.count("**(not as intended)**") == 6   # g_loss is cut from every parameter in the bug
    assert ("**verdict:** d_loss trains 3 parameters; g_loss trains 0 parameters; no gradient reaches "
            "G.w1, G.b1, G.w2; 4 errors, 0 warnings\n") in out
    assert ("**verdict:** d_loss trains 3 parameters; g_loss trains 3 parameters (gradient also reaches 3 "
            "outside its wrt); 0 errors, 0 warnings\n") in out
    assert out.endswith("**3 models checked: 1 failed, 1 invalid (5 errors, 0 warnings)**\n")   # as text says


def test_colour_follows_terminal_no_color_and_flag():
    forced = {"FORCE_COLOR": "1", "NO_COLOR": None, "TERM": "xterm"}   # a dumb TERM gets no colour
    assert "\x1b[" in run("analyze", str(MODELS / "gan.yaml"), env=forced).output
    assert "\x1b[" not in run("--no-color", "analyze", str(MODELS / "gan.yaml"), env=forced).output
    assert "\x1b[" not in run("analyze", str(MODELS / "gan.yaml"), env={**forced, "NO_COLOR": "1"}).output


@pytest.mark.parametrize("command", [["analyze", "M"], ["check", "M"], ["why", "M", "G.w1"], ["graph", "M"],
                                     ["gradcheck", "M", "--samples", "1"], ["ops"]])
def test_no_color_after_the_command_works_as_before_it(command):
    forced = {"FORCE_COLOR": "1", "NO_COLOR": None, "TERM": "xterm"}
    args = [str(MODELS / "gan.yaml") if a == "M" else a for a in command]
    assert "\x1b[" in run(*args, env=forced).output
    after = run(*args, "--no-color", env=forced)
    assert after.exit_code == 0 and "\x1b[" not in after.output
    assert after.output == run("--no-color", *args, env=forced).output


def test_analyze_loss_filter_keeps_only_that_column():
    doc = json.loads(run("analyze", str(MODELS / "gan.yaml"), "--loss", "g_loss", "--format", "json").stdout)
    assert [l["name"] for l in doc["losses"]] == ["g_loss"]
    assert list(doc["params"][0]["grads"]) == ["g_loss"]


@pytest.mark.parametrize("count, jobs", [(1, 2), (7, 2), (200, 2), (1000, 8)])
def test_check_jobs_chunks_keep_every_file_in_order_and_end_small(count, jobs):
    from gradflow.cli.workers import chunked
    chunks = chunked(list(range(count)), jobs)
    assert [item for chunk in chunks for item in chunk] == list(range(count))
    assert max(map(len, chunks)) <= 8 and len(chunks[-1]) == 1


@pytest.mark.parametrize("fmt", sorted(set(MODULES) - SHOW_COUNTERFACTUALS - {"table"}))
def test_check_formats_without_counterfactuals_print_the_same_without_them(fmt, capsys):
    """What lets `check` skip the counterfactual passes for these formats."""
    paths = sorted(str(p) for p in MODELS.glob("*.yaml")) + [BUG]
    printed, documents = [], []
    for counterfactual in (True, False):
        options = {"dims": (), "seed": None, "dtype": "float64", "structural": False,
                   "counterfactual": counterfactual}
        results = [check_one(path, {}, options) for path in paths]
        assert all(r.error is None for r in results)
        FORMATS[fmt].render_check(results, True)
        printed.append(capsys.readouterr().out)
        documents.append(json.dumps([r.report.to_dict() for r in results]))
    assert printed[0] == printed[1]
    assert documents[0] != documents[1]   # the reports themselves differ


@pytest.mark.parametrize("fmt, loaded", [("text", False), ("json", True)])
def test_check_loads_the_counterfactual_walk_only_for_formats_that_show_it(fmt, loaded):
    import subprocess
    import sys
    code = ("import sys; from gradflow.cli.main import main; sys.argv = ['gradflow', 'check', "
            f"'--format', '{fmt}', {str(MODELS / 'stop_gradient_tape.yaml')!r}]\n"
            "import atexit; atexit.register(lambda: print([m for m in ('gradflow.analysis.counterfactual', "
            "'gradflow.engine.rows') if m in sys.modules], file=sys.stderr))\n"
            "main()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    last = done.stderr.strip().splitlines()[-1]
    assert last == (str(['gradflow.analysis.counterfactual', 'gradflow.engine.rows']) if loaded else "[]")


def test_a_missing_path_reads_the_same_for_check_as_for_analyze(tmp_path):
    missing = str(tmp_path / "missing.yaml")
    expected = f"{missing}:1:1: error: cannot read model: No such file or directory\n"
    assert run("check", missing).stderr == expected and run("analyze", missing).stderr == expected


def test_debug_after_the_command_works_as_before_it():
    invalid = str(ROOT / "tests/models/invalid/clip_bound_not_a_number.yaml")
    before, after = run("--debug", "analyze", invalid), run("analyze", invalid, "--debug")
    assert after.exit_code == before.exit_code == 2
    assert "Traceback" in after.stderr and "Traceback" not in run("analyze", invalid).stderr
    assert after.stderr.splitlines()[-1] == before.stderr.splitlines()[-1]


def test_rule_descriptions_are_plain_text_for_junit_and_sarif():
    # They are JUnit test names and SARIF descriptions, where markdown backticks show as such.
    root = ET.fromstring(run("check", str(MODELS / "gan.yaml"), "--format", "junit").stdout)
    names = [case.get("name") for case in root.iter("testcase")]
    assert len(names) == 11 and not any("`" in name for name in names)
    assert "GF108 vanishing gradient: norm below the vanishing setting" in names


@pytest.mark.parametrize("command", [["schema"], ["import", "torch", "nothing.py:f"]])
def test_every_command_takes_the_group_flags_after_it(command):
    for flag in ("--no-color", "--debug"):
        result = run(*command, flag)
        assert "No such option" not in result.output and result.output == run(flag, *command).output


def test_first_errors_says_each_distinct_error_once_at_the_first_result_that_has_it():
    from gradflow.cli.render import first_errors
    from gradflow.cli.run import Result
    from gradflow.errors import ModelError
    spoilt = [Result(f"m{k}.yaml", error=ModelError("vanishing must be positive", "pyproject.toml", 2, 1))
              for k in range(3)]
    own = Result("n.yaml", error=ModelError("unknown op 'relux'", "n.yaml", 4, 7))
    results = [spoilt[0], Result("ok.yaml"), spoilt[1], own, spoilt[2]]
    assert [first for _, first in first_errors(results)] == [True, False, False, True, False]


def test_check_sarif_locations_are_uri_references_a_space_percent_or_colon_encoded_an_absolute_path_a_file_uri(
        tmp_path, monkeypatch):
    # SARIF 2.1.0: artifactLocation.uri is a URI reference (RFC 3986), not a file path.
    import re
    from urllib.parse import unquote, urlparse
    text = (MODELS / "dead_relu.yaml").read_text(encoding="utf-8")
    (tmp_path / "my models").mkdir()
    (tmp_path / "my models" / "a:b 100%.yaml").write_text(text, encoding="utf-8")
    (tmp_path / "abs.yaml").write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    doc = json.loads(run("check", "my models/a:b 100%.yaml", str(tmp_path / "abs.yaml"), "--format", "sarif").stdout)
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in doc["runs"][0]["results"]]
    relative = [u for u in uris if not u.startswith("file:")]
    absolute = [u for u in uris if u.startswith("file:")]
    assert relative and absolute
    for uri in uris:
        assert re.fullmatch(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-F]{2})+", uri), uri
    assert all(":" not in u.split("/")[0] and unquote(u) == "my models/a:b 100%.yaml" for u in relative)
    assert all(urlparse(u).scheme == "file" and unquote(urlparse(u).path) == str(tmp_path / "abs.yaml")
               for u in absolute)


def test_check_junit_structural_skips_the_rules_that_need_numbers_rather_than_passing_them():
    # --structural computes no gradient values: NaN, zero, vanishing and exploding are never checked.
    root = ET.fromstring(run("check", str(MODELS / "dead_relu.yaml"), "--structural", "--format", "junit").stdout)
    [suite] = root.findall("testsuite")
    skipped = {c.get("name").split()[0]: c.find("skipped").get("message") for c in suite.findall("testcase")
               if c.find("skipped") is not None}
    assert sorted(skipped) == ["GF105", "GF107", "GF108", "GF109"]
    assert all("--structural" in message for message in skipped.values())
    assert suite.get("skipped") == root.get("skipped") == "4"
    numeric = ET.fromstring(run("check", str(MODELS / "dead_relu.yaml"), "--format", "junit").stdout)
    assert numeric.get("skipped") == "0"
