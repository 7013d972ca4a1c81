"""--weights archives: only plain numeric .npy members, checked against the model before
their data is read; every refusal is one located error, never numpy's own advice."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import numpy.lib.format as npy
import pytest

import gradflow
from gradflow.errors import ModelError
from tests.bombs import write_zip_bomb
from tests.conftest import MODELS

TAPE = str(MODELS / "stop_gradient_tape.yaml")
INT_MODEL = """
gradflow: 1
inputs:
  idx: {shape: [3], dtype: int}
params:
  w: {shape: [4]}
graph:
  loss: sum(take(w, idx))
losses:
  loss: {wrt: [w]}
"""


def header_only(shape, descr="<f8") -> bytes:
    out = io.BytesIO()
    npy.write_array_header_1_0(out, {"descr": descr, "fortran_order": False, "shape": shape})
    return out.getvalue()


def zip_of(path, members: dict, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression=compression) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return str(path)


def refusal(weights, model=TAPE) -> ModelError:
    with pytest.raises(ModelError) as caught:
        gradflow.load(model, weights=weights).materialize()
    return caught.value


def test_weights_named_with_integer_segments_are_keys_verbatim(tmp_path, write_model):
    from click.testing import CliRunner

    from gradflow.cli.main import cli
    model = write_model("""
        gradflow: 1
        params:
          G.0.weight: {shape: [2]}
        graph:
          loss: sum(G.0.weight * G.0.weight)
        losses:
          loss: {wrt: [G.0.weight]}
        """)
    weights, grads = tmp_path / "w.npz", tmp_path / "g.npz"
    np.savez(weights, **{"G.0.weight": np.array([1.0, 2.0]), "G.1.weight": np.zeros(1)})
    result = CliRunner().invoke(cli, ["analyze", model, "--weights", str(weights), "--save-grads", str(grads)])
    assert result.exit_code == 0, result.output
    assert result.stderr == (f"{weights}: warning: key 'G.1.weight' names no parameter or input of {model}; "
                             "ignored\n")
    with np.load(grads) as saved:
        assert saved.files == ["loss/G.0.weight"] and saved["loss/G.0.weight"].tolist() == [2.0, 4.0]


def test_weights_object_array_is_refused_without_numpy_pickle_advice(tmp_path):
    path = tmp_path / "w.npz"
    np.savez(path, x=np.array([1, "a"], dtype=object))
    e = refusal(str(path))
    assert (e.path, e.line, e.col) == (str(path), 1, 1)
    assert "Python objects" in e.message and "allow_pickle" not in e.message


def test_weights_member_that_is_a_pickle_is_refused(tmp_path):
    e = refusal(zip_of(tmp_path / "w.npz", {"x.npy": b"\x80\x04K\x01."}))
    assert "'x.npy' is not a valid .npy array" in e.message


def test_weights_member_that_is_not_npy_is_refused(tmp_path):
    e = refusal(zip_of(tmp_path / "w.npz", {"x.pkl": b"\x80\x04K\x01."}))
    assert "'x.pkl' is not a .npy array" in e.message


def test_weights_plain_npy_instead_of_npz_says_how_to_save(tmp_path):
    path = tmp_path / "w.npy"
    np.save(path, np.zeros(3))
    assert "a single .npy array, not an .npz archive" in refusal(str(path)).message


def test_weights_header_of_a_trillion_elements_is_refused_before_reading(tmp_path):
    e = refusal(zip_of(tmp_path / "w.npz", {"x.npy": header_only((10 ** 12,))}))
    assert "needs 8,000,000,000,128" in e.message


def test_weights_unknown_key_is_never_read(tmp_path):
    # A pickle under a name the model does not have: a warning, and no error from its bytes.
    path = zip_of(tmp_path / "w.npz", {"nothing.npy": b"\x80\x04K\x01." * 100})
    m = gradflow.load(TAPE, weights=path)
    m.materialize()
    assert m.warnings == [(path, f"key 'nothing' names no parameter or input of {TAPE}; ignored", 0, 0),
                          (TAPE, f"{path} has no value for 2 parameters ('x', 'y'); they keep their value from the "
                                 "model", 9, 3)]


def test_weights_that_miss_parameters_or_name_others_say_so_once_each(tmp_path):
    # Two warnings, not one per key; the parameters left at their init are named, at the first
    # of them, since the report is not about the trained values the user means.
    path = tmp_path / "w.npz"
    np.savez(path, **{f"other.{k}": np.zeros(3) for k in ("a", "b", "c", "d")}, x=np.array(1.0))
    m = gradflow.load(TAPE, weights=path)
    assert m.warnings == [(str(path), f"4 keys ('other.a', 'other.b', 'other.c', ...) name no parameter or input "
                                      f"of {TAPE}; ignored", 0, 0),
                          (TAPE, f"{path} has no value for parameter 'y'; it keeps its value from the model", 10, 3)]
    np.savez(path, x=np.array(1.0), y=np.array(1.0))
    assert gradflow.load(TAPE, weights=path).warnings == []


@pytest.mark.parametrize("keys, hint", [
    # A state dict saved from DataParallel (or torch.compile's wrapper) prefixes every key ...
    (["module.x", "module.y"], " (without the prefix 'module.', 2 would)"),
    (["module._orig_mod.y"], " (without the prefix 'module._orig_mod.', it would)"),
    # ... and one saved from a submodule alone lacks the prefix the model's names carry.
    (["weight", "bias", "other"], " (with the prefix 'enc.', 2 would)"),
    (["module.z", "q"], ""),
])
def test_weights_keys_that_name_nothing_say_which_prefix_would_make_them_name_something(tmp_path, write_model,
                                                                                         keys, hint):
    model = write_model("""
        gradflow: 1
        inputs:
          x: {shape: [3]}
        params:
          y: {shape: [3]}
          enc.weight: {shape: [3]}
          enc.bias: {shape: [3]}
        graph:
          loss: sum(x * y * enc.weight + enc.bias)
        losses: [loss]
        """)
    path = tmp_path / "w.npz"
    np.savez(path, **{k: np.zeros(3) for k in keys})
    [unknown, _] = gradflow.load(model, weights=path).warnings
    assert unknown.message.endswith(f"of {model}; ignored{hint}")


def test_weights_warnings_name_the_model_and_are_annotated_on_github(tmp_path):
    from click.testing import CliRunner

    from gradflow.cli.main import cli
    path = tmp_path / "w.npz"
    np.savez(path, **{"module.x": np.zeros(3)})
    result = CliRunner().invoke(cli, ["check", "--format", "github", TAPE, "--weights", str(path)])
    assert result.stdout.splitlines()[:2] == [
        f"::warning file={path},title=input::key 'module.x' names no parameter or input of {TAPE}; ignored "
        "(without the prefix 'module.', it would)",
        f"::warning file={TAPE},line=9,col=3,title=input::{path} has no value for 2 parameters ('x', 'y'); "
        "they keep their value from the model"]
    assert result.stderr.splitlines()[1] == (f"{TAPE}:9:3: warning: {path} has no value for 2 parameters "
                                             "('x', 'y'); they keep their value from the model")


def test_weights_zip_bomb_shape_is_checked_before_decompressing(tmp_path):
    path = tmp_path / "w.npz"
    write_zip_bomb(path, "x.npy", header_only((1 << 27,)), 1024)   # 1 GiB of zeros in 1 MiB
    assert path.stat().st_size < 2 << 20
    e = refusal(str(path))
    assert e.path == TAPE and "has shape [134217728], but the model declares []" in e.message


def test_weights_zip_bomb_of_the_right_shape_is_not_read_before_the_memory_estimate(tmp_path, write_model):
    from gradflow.analysis.analyze import analyze
    model = write_model("gradflow: 1\nparams:\n  w: {shape: [134217728]}\ngraph:\n  z: sum(w)\nlosses: [z]\n")
    path = tmp_path / "w.npz"
    write_zip_bomb(path, "w.npy", header_only((1 << 27,)), 1024)
    m = gradflow.load(model, weights=str(path))
    with pytest.raises(ModelError, match="a numeric run needs about 3 GiB"):
        analyze(m)
    assert m.params["w"].value is None   # nothing was read


def test_weights_declared_size_must_match_the_header(tmp_path):
    e = refusal(zip_of(tmp_path / "w.npz", {"x.npy": header_only(()) + bytes(100)}))
    assert "declares 228 bytes, but its header [] float64 needs 136" in e.message


def test_weights_truncated_archive_is_refused(tmp_path):
    full = tmp_path / "full.npz"
    np.savez(full, x=np.array(5.0), y=np.array(1.0))
    cut = tmp_path / "cut.npz"
    cut.write_bytes(full.read_bytes()[:200])
    assert "cannot read weights: not an .npz archive" in refusal(str(cut)).message


def test_weights_damaged_data_is_found_when_read(tmp_path):
    path = tmp_path / "w.npz"
    np.savez_compressed(path, x=np.array(5.0))
    data = bytearray(path.read_bytes())
    start = data.index(b"x.npy") + len("x.npy")   # the local header's name, then the deflated data
    data[start + 40] ^= 0xFF
    path.write_bytes(bytes(data))
    e = refusal(str(path))
    assert e.path == str(path) and "cannot read weights" in e.message


@pytest.mark.parametrize("kind", ["directory", "fifo", "device"])
def test_weights_that_are_not_a_regular_file_are_refused_at_once(tmp_path, kind):
    import os
    path = {"directory": str(tmp_path), "device": "/dev/zero"}.get(kind)
    if kind == "fifo":
        path = str(tmp_path / "pipe.npz")
        os.mkfifo(path)
    e = refusal(path)
    assert e.message.startswith("cannot read weights: ") and "not a regular file" in e.message


@pytest.mark.parametrize("values", [np.array([0, 1, 2**64 - 1], dtype=np.uint64),
                                    np.array([0, 1, 2**63], dtype=np.uint64)])
def test_weights_integers_out_of_range_are_errors_not_wrapped(tmp_path, write_model, values):
    path = tmp_path / "w.npz"
    np.savez(path, idx=values)
    e = refusal(str(path), write_model(INT_MODEL))
    assert e.line == 3 and "outside int64's range" in e.message


def test_weights_small_unsigned_integers_fill_an_int_input(tmp_path, write_model):
    path = tmp_path / "w.npz"
    np.savez(path, idx=np.array([0, 3, 1], dtype=np.uint8))
    m = gradflow.load(write_model(INT_MODEL), weights=str(path))
    m.materialize()
    assert m.inputs["idx"].value.tolist() == [0, 3, 1] and m.inputs["idx"].value.dtype == np.int64


def test_weights_float_values_for_an_int_input_are_refused(tmp_path, write_model):
    path = tmp_path / "w.npz"
    np.savez(path, idx=np.array([0.0, 1.5, 2.0]))
    e = refusal(str(path), write_model(INT_MODEL))
    assert e.line == 3 and "has dtype float64, but the model declares int" in e.message


def test_weights_too_large_for_float32_are_refused(tmp_path):
    path = tmp_path / "w.npz"
    np.savez(path, x=np.array(1e300), y=np.array(1.0))
    with pytest.raises(ModelError, match="too large for float32"):
        gradflow.load(TAPE, weights=str(path), dtype="float32").materialize()


def test_weights_fortran_order_and_big_endian_read_as_saved(tmp_path, write_model):
    model = write_model("""
        gradflow: 1
        params:
          w: {shape: [2, 3]}
        graph:
          loss: sum(w)
        losses:
          loss: {wrt: [w]}
        """)
    values = np.asfortranarray(np.arange(6.0).reshape(2, 3)).astype(">f8")
    path = tmp_path / "w.npz"
    np.savez(path, w=values)
    m = gradflow.load(model, weights=str(path))
    m.materialize()
    assert m.params["w"].value.tolist() == values.tolist()


def test_weights_archive_of_thousands_of_members_is_read_in_linear_time(tmp_path, write_model):
    import time
    n = 2000
    model = write_model("gradflow: 1\nparams:\n" + "".join(f"  p{i}: {{shape: [2]}}\n" for i in range(n))
                        + "graph:\n  z: sum(p0) + sum(p1)\nlosses: [z]\n")
    path = tmp_path / "w.npz"
    np.savez(path, **{f"p{i}": np.full(2, float(i)) for i in range(n)})
    start = time.monotonic()
    m = gradflow.load(model, weights=str(path))
    m.materialize()
    assert time.monotonic() - start < 3.0   # the zip directory was parsed once per member: 8 s
    assert m.params[f"p{n - 1}"].value.tolist() == [n - 1.0, n - 1.0]


def test_weights_archive_replaced_between_checking_and_reading_is_an_error(tmp_path):
    path = tmp_path / "w.npz"
    np.savez(path, x=np.array(5.0), y=np.array(1.0))
    m = gradflow.load(TAPE, weights=str(path))
    np.savez(path, z=np.array(1.0))   # another archive under the same name before the values are read
    with pytest.raises(ModelError, match="cannot read weights: member 'x.npy' is damaged"):
        m.materialize()


@pytest.mark.parametrize("change", ["compression method 99", "encrypted flag"])
def test_weights_member_zipfile_cannot_open_is_a_located_error(tmp_path, change):
    path = tmp_path / "w.npz"
    np.savez(path, x=np.array(5.0), y=np.array(1.0))
    data = bytearray(path.read_bytes())
    for signature, flags_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):   # local and central headers
        at = data.index(signature)
        if change == "encrypted flag":
            data[at + flags_at] |= 1
        else:
            data[at + flags_at + 2:at + flags_at + 4] = (99).to_bytes(2, "little")
    path.write_bytes(bytes(data))
    e = refusal(str(path))
    assert e.path == str(path) and e.message.startswith("cannot read weights: member 'x.npy'")
