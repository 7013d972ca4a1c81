"""`gradflow check PATH...`: which files are models, and what happens to the ones that
cannot be read. A directory with no model fails; one bad file never costs the others."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from gradflow.cli.discover import MAX_EVENTS, declares_model
from gradflow.cli.main import cli
from tests.conftest import MODELS

TAPE = (MODELS / "stop_gradient_tape.yaml").read_text(encoding="utf-8")
MINIMAL = "gradflow: 1\nparams:\n  w: {value: 1.0}\ngraph:\n  z: w * w\nlosses: [z]\n"


def run(*args, color=False):
    """color=True: click keeps escape sequences as a terminal would get them."""
    return CliRunner().invoke(cli, [str(a) for a in args], color=color)


def checked(result) -> list:
    return [f["model"]["path"] for f in json.loads(result.stdout)["files"]]


@pytest.mark.parametrize("text", [
    "\ufeffgradflow: 1\n",
    "{gradflow: 1, graph: {z: w}}\n",
    '"gradflow": 1\n',
    "'gradflow': 1\n",
    "? gradflow\n: 1\n",
    "description: |\n" + "  a long description line\n" * 50_000 + "gradflow: 1\n",
    "name: x\n# gradflow: 0\ngradflow: 1\n",
    "--- !!map\ngradflow: 1\n",
    "run: !!python/object/apply:os.system ['exit 3']\ngradflow: 1\n",   # seen, never constructed
    "%YAML 1.1\n---\ngradflow: 1\n",
])
def test_discover_model_by_its_parsed_top_level_keys(text):
    assert declares_model(text.encode("utf-8"))


@pytest.mark.parametrize("text", [
    "description: |\n  gradflow: 1\n",
    "description: >\n  x\ngradflow_version: 1\n",
    'description: "first line\ngradflow: 1"\n',
    "name: x\n---\ngradflow: 1\n",
    "nested:\n  gradflow: 1\n",
    "- gradflow: 1\n",
    "gradflow\n",
    "gradfow: 1\n",
    "{a: 1, b: {gradflow: 1}}\n",
    "? [gradflow]\n: 1\n",
    "run: !!python/object/apply:os.system ['exit 3']\n",
    "",
])
def test_discover_not_a_model_when_gradflow_is_not_a_top_level_key(text):
    assert not declares_model(text.encode("utf-8"))


def test_discover_yaml_that_does_not_parse_is_a_model_when_a_line_starts_with_gradflow():
    assert declares_model(b"gradflow: 1\nparams: [unclosed\n")
    assert not declares_model(b"helm: {{ .Values.x }}\n  bad: [\n")


def test_check_empty_directory_exits_2(tmp_path):
    result = run("check", tmp_path)
    assert result.exit_code == 2
    assert result.stderr == f"gradflow: error: no model files found in {tmp_path}\n"


def test_check_directory_with_a_misspelt_key_exits_2(tmp_path):
    (tmp_path / "m.yaml").write_text(MINIMAL.replace("gradflow:", "gradfow:"))
    result = run("check", tmp_path, "--format", "json")
    assert result.exit_code == 2 and result.stdout == ""
    assert "no model files found in" in result.stderr


def test_check_directory_finds_flow_style_bom_and_quoted_models(tmp_path):
    (tmp_path / "a.yaml").write_text("\ufeff" + MINIMAL, encoding="utf-8")
    (tmp_path / "b.yaml").write_text(MINIMAL.replace("gradflow: 1", '"gradflow": 1'))
    (tmp_path / "c.yml").write_text("{gradflow: 1, params: {w: {value: 1.0}}, graph: {z: w * w}, "
                                    "losses: [z]}\n")
    (tmp_path / "d.yaml").write_text("description: |\n  gradflow: 1\n")
    result = run("check", tmp_path, "--format", "json")
    assert result.exit_code == 0, result.output
    assert checked(result) == [str(tmp_path / n) for n in ("a.yaml", "b.yaml", "c.yml")]


def test_check_file_named_explicitly_must_be_a_model(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("just: config\n")
    result = run("check", path)
    assert result.exit_code == 2 and result.stderr.startswith(f"{path}:1:1: error: not a gradflow model: no 'gradflow: 1'")


def unreadable(path: Path) -> None:
    """A file that open() accepts and read() refuses, even for root: /proc/self/mem at 0."""
    if os.getuid() != 0:
        path.write_text(MINIMAL)
        path.chmod(0)
    else:
        path.symlink_to("/proc/self/mem")


def special_files(folder: Path) -> dict:
    """A regular model, then every kind of candidate that cannot be read, by expected message."""
    (folder / "good.yaml").write_text(MINIMAL)
    os.mkfifo(folder / "fifo.yaml")
    (folder / "device.yaml").symlink_to("/dev/zero")
    (folder / "dangling.yaml").symlink_to(folder / "nowhere")
    (folder / "self.yaml").symlink_to(folder / "self.yaml")
    unreadable(folder / "unreadable.yaml")
    return {"device.yaml": "a character device, not a regular file",
            "dangling.yaml": "No such file or directory",
            "fifo.yaml": "a named pipe (FIFO), not a regular file",
            "self.yaml": "Too many levels of symbolic links",
            "unreadable.yaml": "cannot read"}


def test_check_special_files_in_a_scan_are_one_error_each_and_the_rest_is_checked(tmp_path):
    expected = special_files(tmp_path)
    result = run("check", tmp_path, "--format", "json")
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == len(expected)
    for line, (name, message) in zip(lines, sorted(expected.items())):
        assert line.startswith(f"{tmp_path / name}:1:1: error: cannot read") and message in line
    doc = json.loads(result.stdout)
    assert doc["summary"]["files"] == 6 and doc["summary"]["invalid"] == 5
    assert [f["model"]["path"] for f in doc["files"]][3] == str(tmp_path / "good.yaml")


def test_check_directory_symlink_loop_is_one_warning(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "m.yaml").write_text(MINIMAL)
    (tmp_path / "d" / "loop").symlink_to(tmp_path)
    (tmp_path / "again").symlink_to(tmp_path / "d")
    result = run("check", tmp_path, "--format", "json")
    assert result.exit_code == 0, result.output
    assert checked(result) == [str(tmp_path / "again" / "m.yaml")]
    assert result.stderr == f"{tmp_path / 'again' / 'loop'}: warning: symbolic link loop, not followed\n"


def test_check_file_names_with_control_characters_are_escaped_everywhere(tmp_path):
    bad = tmp_path / "evil\n\x1b[2Jname\r\ufffe.yaml"
    bad.write_text("gradflow: 1\ngraph: {z: nope}\n")
    (tmp_path / "good.yaml").write_text(MINIMAL)
    result = run("check", tmp_path, color=True)
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(str(tmp_path) + "/evil\\n\\x1b[2Jname\\r\\ufffe.yaml:")
    junit = run("check", tmp_path, "--format", "junit", color=True).stdout
    suites = ET.fromstring(junit)   # well-formed XML despite the name
    assert len(suites) == 2 and "\x1b" not in junit
    for fmt in ("text", "github", "markdown", "sarif", "json"):
        out = run("check", tmp_path, "--format", fmt, color=True)
        assert "\x1b" not in out.stdout + out.stderr and "\r" not in out.stdout + out.stderr, fmt


def test_check_unlistable_directory_is_an_error_for_that_directory(tmp_path, monkeypatch):
    (tmp_path / "good.yaml").write_text(MINIMAL)
    (tmp_path / "sub").mkdir()
    real = os.scandir

    def scandir(path):
        if str(path).endswith("sub"):
            raise PermissionError(13, "Permission denied")
        return real(path)
    monkeypatch.setattr("gradflow.cli.discover.os.scandir", scandir)
    result = run("check", tmp_path, "--format", "json")
    assert result.exit_code == 2
    assert result.stderr == f"{tmp_path / 'sub'}:1:1: error: cannot read directory: Permission denied\n"
    assert checked(result) == [str(tmp_path / "good.yaml"), str(tmp_path / "sub")]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_check_internal_failure_in_one_file_is_reported_for_that_file(tmp_path, monkeypatch, jobs):
    for name in ("a.yaml", "b.yaml", "c.yaml"):
        (tmp_path / name).write_text(MINIMAL)
    real = __import__("gradflow.cli.run", fromlist=["x"]).analyze_file

    def analyze_file(path, **kwargs):
        if path.endswith("b.yaml"):
            raise ZeroDivisionError("boom")
        return real(path, **kwargs)
    monkeypatch.setattr("gradflow.cli.run.analyze_file", analyze_file)
    result = run("check", tmp_path, "--format", "junit", "-j", jobs)
    assert result.exit_code == 2
    assert result.stderr == (f"{tmp_path / 'b.yaml'}:1:1: error: internal error: ZeroDivisionError: boom "
                             "(rerun with --debug)\n")
    suites = ET.fromstring(result.stdout)
    assert [s.get("name") for s in suites] == [str(tmp_path / n) for n in ("a.yaml", "b.yaml", "c.yaml")]


def test_check_worker_that_dies_costs_only_its_own_file(tmp_path, monkeypatch):
    for name in ("a.yaml", "b.yaml", "c.yaml", "d.yaml"):
        (tmp_path / name).write_text(MINIMAL)
    real = __import__("gradflow.cli.run", fromlist=["x"]).analyze_file

    def analyze_file(path, **kwargs):
        if path.endswith("b.yaml"):
            os._exit(9)   # as a worker killed for memory ends
        return real(path, **kwargs)
    monkeypatch.setattr("gradflow.cli.run.analyze_file", analyze_file)
    result = run("check", tmp_path, "--format", "json", "-j", "2")
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"{tmp_path / 'b.yaml'}:1:1: error: internal error: WorkerDied: "
                           "the process checking this file died")
    doc = json.loads(result.stdout)
    assert [f.get("error") is None for f in doc["files"]] == [True, False, True, True]


KEYS = ["gradflow", "name", "graph", "description", "gradflow ", "Gradflow", "x"]
VALUES = [1, "gradflow: 1", "a\ngradflow: 1\n", [1, {"gradflow": 1}], {"gradflow": 1}, None, "x" * 300]


@settings(max_examples=200, derandomize=True, deadline=None, database=None)
@given(st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=5),
       st.sampled_from([{}, {"default_flow_style": True}, {"default_style": '"'}, {"default_style": "|"},
                        {"explicit_start": True}, {"allow_unicode": True, "width": 20}]),
       st.booleans(), st.booleans())
def test_discover_agrees_with_what_yaml_parses(mapping, style, bom, second_document):
    """Whatever way a mapping is written, it is a model exactly when PyYAML reads a top-level
    'gradflow' key from it; a later document never counts."""
    text = yaml.safe_dump(mapping, sort_keys=False, **style)
    if second_document:
        text += "---\n" + yaml.safe_dump({"gradflow": 1}, **style)
    first = next(yaml.safe_load_all(text), None)
    expected = isinstance(first, dict) and "gradflow" in first
    assert declares_model((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8")) == expected


def test_discover_large_yaml_is_judged_in_bounded_time(monkeypatch):
    # Bounded as a count of events read, not a time: the whole parse took 3.6 s.
    many_keys = b"".join(b"k%d: 1\n" % i for i in range(1_500_000))   # 16 MiB, no gradflow key
    pulled, parse = [], yaml.parse

    def counting(*args, **kwargs):
        for event in parse(*args, **kwargs):
            pulled.append(event)
            yield event
    monkeypatch.setattr(yaml, "parse", counting)
    assert not declares_model(many_keys)
    assert declares_model(many_keys + b"gradflow: 1\n")   # too large to load: the loader says so
    assert 0 < len(pulled) <= 2 * (MAX_EVENTS + 2)


def test_check_directory_lists_files_in_path_order(tmp_path):
    for name in ("b.yaml", "a.yaml", "a/z.yaml", "a/b/c.yml", "A.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(MINIMAL)
    result = run("check", tmp_path, "--format", "json")
    assert checked(result) == [str(tmp_path / n) for n in ("A.yaml", "a/b/c.yml", "a/z.yaml", "a.yaml", "b.yaml")]


def test_check_lists_each_file_once(tmp_path):
    (tmp_path / "m.yaml").write_text(MINIMAL)
    (tmp_path / "link.yaml").symlink_to(tmp_path / "m.yaml")
    result = run("check", tmp_path, tmp_path / "m.yaml", "--format", "json")
    assert checked(result) == [str(tmp_path / "link.yaml")]
