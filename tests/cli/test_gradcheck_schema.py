"""`gradflow gradcheck` (tape vs finite differences on a whole model) and `gradflow schema`."""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

import gradflow
from gradflow.analysis.gradcheck import gradcheck
from gradflow.cli.main import cli
from gradflow.engine import OPS
from tests.conftest import MODELS

ZOO = sorted(MODELS.glob("*.yaml"))


def run(*args):
    return CliRunner().invoke(cli, list(args))


@pytest.mark.parametrize("path", ZOO, ids=lambda p: p.stem)
def test_gradcheck_passes_on_every_shipped_model(path):
    checks = gradcheck(gradflow.load(path), samples=3)
    assert checks and all(c.ok for c in checks), [c for c in checks if not c.ok]


def test_gradcheck_holds_stops_fixed_so_straight_through_checks_out():
    checks = {(c.loss, c.param): c for c in gradcheck(gradflow.load(MODELS / "vq_vae.yaml"))}
    assert checks[("recon_loss", "enc.w")].ok
    assert checks[("recon_loss", "enc.w")].max_abs_error < 1e-7


def test_gradcheck_catches_a_wrong_gradient_rule(monkeypatch):
    wrong = dataclasses.replace(OPS["tanh"], vjps=(lambda g, ans, x: g * (1 - ans),))
    monkeypatch.setitem(OPS, "tanh", wrong)
    result = run("gradcheck", str(MODELS / "vae.yaml"))
    assert result.exit_code == 1
    assert "FAIL at" in result.output and "failed" in result.output


def test_gradcheck_skips_losses_through_grad_scale(write_model):
    path = write_model("""
        gradflow: 1
        params:
          w: {shape: [3], init: ones}
        graph:
          loss: sum(grad_scale(w * w, 0.5))
        losses: [loss]
    """)
    [check] = gradcheck(gradflow.load(path))
    assert check.skipped.startswith("grad_scale") and check.ok


def test_gradcheck_skips_an_embedding_with_padding_idx_and_compares_one_without(write_model):
    # the padding row is read but not trained, as torch's: its finite difference is not the gradient
    path = write_model("""
        gradflow: 1
        inputs:
          idx: {value: [0, 1, 0, 2], dtype: int}
        params:
          padded: {shape: [3, 2]}
          plain: {shape: [3, 2]}
        graph:
          loss: sum(square(embedding(idx, padded, padding_idx=0))) + sum(square(embedding(idx, plain)))
        losses: [loss]
    """)
    checks = {c.param: c for c in gradcheck(gradflow.load(path))}
    assert checks["padded"].skipped == "embedding(padding_idx=0) on the way: its gradient is not a derivative"
    assert not checks["plain"].skipped and checks["plain"].entries == 6 and checks["plain"].ok


def test_gradcheck_that_skipped_every_pair_does_not_pass(write_model):
    path = write_model("""
        gradflow: 1
        params:
          w: {shape: [3], init: ones}
        graph:
          loss: sum(grad_reverse(w * w))
        losses: [loss]
    """)
    result = run("gradcheck", path)
    assert result.exit_code == 1
    assert "skipped: grad_reverse" in result.output
    assert "0 pairs compared, 1 skipped: nothing was compared" in result.output


def test_gradcheck_compares_pairs_whose_gradient_avoids_the_rescaling_node(write_model):
    path = write_model("""
        gradflow: 1
        params:
          w: {shape: [3], init: ones}
          v: {shape: [3], init: ones}
        graph:
          loss: sum(grad_reverse(w * w)) + sum(v * v)
        losses: [loss]
    """)
    checks = {c.param: c for c in gradcheck(gradflow.load(path))}
    assert checks["w"].skipped and not checks["v"].skipped and checks["v"].entries == 3
    result = run("gradcheck", path)
    assert result.exit_code == 0 and "1 pair compared, 1 skipped: ok" in result.output


def test_gradcheck_cli_exit_0_and_a_row_per_pair():
    result = run("gradcheck", str(MODELS / "stop_gradient_tape.yaml"))
    assert result.exit_code == 0
    assert "1 pair compared: ok" in result.output


def test_schema_is_json_and_accepts_every_shipped_model():
    schema = json.loads(run("schema").output)
    jsonschema.Draft202012Validator.check_schema(schema)
    for path in ZOO:
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)


def test_schema_rejects_an_unknown_key_and_a_bad_version():
    schema = json.loads(run("schema").output)
    model = yaml.safe_load((MODELS / "stop_gradient_tape.yaml").read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**model, "grpah": {}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**model, "gradflow": 2}, schema)
