"""The model zoo: every file passes `gradflow check`, and every file's expectations bite."""

from __future__ import annotations

import fnmatch
import json

import pytest
import yaml
from click.testing import CliRunner

from gradflow.cli.main import cli
from tests.conftest import MODELS

ZOO = sorted(MODELS.glob("*.yaml"))
OTHER = {"flows": "blocked", "zero": "flows", "blocked": "flows", "unreachable": "flows"}


def check(*args) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["check", *map(str, args), "--format", "json"])
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else {}


def test_the_zoo_passes_check():
    code, doc = check(MODELS)
    assert code == 0, doc["summary"]
    assert doc["summary"]["files"] == len(ZOO) >= 20


@pytest.mark.parametrize("path", ZOO, ids=lambda p: p.stem)
def test_each_model_documents_itself(path):
    text = path.read_text(encoding="utf-8")
    model = yaml.safe_load(text)
    assert text.startswith("#"), "a comment says what the pattern is and where the stop goes"
    assert model.get("description") and model.get("expect")


@pytest.mark.parametrize("path", ZOO, ids=lambda p: p.stem)
def test_flipping_one_expectation_fails_with_gf100_naming_the_pair(path, tmp_path):
    model = yaml.safe_load(path.read_text(encoding="utf-8"))
    _, doc = check(path)
    params = [p["name"] for p in doc["files"][0]["params"]]
    loss, statuses = next(iter(model["expect"].items()))
    status, globs = next(iter(statuses.items()))
    globs = [globs] if isinstance(globs, str) else globs
    param = next(p for p in params if any(fnmatch.fnmatchcase(p, g) for g in globs))
    flipped = OTHER[status]
    model["expect"][loss] = {**statuses, flipped: [*statuses.get(flipped, []), param]}
    changed = tmp_path / path.name
    changed.write_text(yaml.safe_dump(model, sort_keys=False), encoding="utf-8")
    code, doc = check(changed)
    assert code == 1
    gf100 = [f for f in doc["files"][0]["findings"] if f["rule"] == "GF100"]
    assert any(f["loss"] == loss and param in f["params"] for f in gf100), gf100
