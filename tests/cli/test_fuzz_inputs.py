"""Bad inputs around the model file, generated at random, against the contract of SPEC 9.

Classes: ``--weights`` archives (random bytes, truncated and bit-flipped archives,
random .npy headers, member names and dtypes, pickles, bombs), kinds of file where a
model or archive is expected (FIFOs, devices, stdin of /dev/zero, a 20 GB sparse file,
directories, dangling and looping links), and file names with control characters,
newlines, direction overrides and bytes that are not UTF-8 in a directory scan.

Every case runs through the command line in one child process per class, under an
address-space limit (``RLIMIT_AS``), with its stdin on /dev/zero; each must end in
time with exit 0/1, or exit 2 with exactly one located ``FILE:LINE:COL: error:`` line
or a click usage error: no traceback, no ``internal error``, no raw control character.

The cases are the same every run; GRADFLOW_FUZZ_SEED=N draws another set.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import resource
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ET
import zipfile

import numpy as np
import numpy.lib.format as npy
import pytest

from tests.bombs import write_zip_bomb
from tests.conftest import MODELS, ROOT

SEED = int(os.environ.get("GRADFLOW_FUZZ_SEED", "0"))
MEMORY = 768 * 1024 * 1024   # address space of the child: numpy and rich fit well inside
SECONDS = 2.0                # per case
LOCATED = re.compile(r"(?P<path>.+):(?P<line>\d+):(?P<col>\d+): error: (?P<message>.+)")
NOTHING_FOUND = re.compile(r"gradflow: error: no model files found in .+")
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
TAPE = str(MODELS / "stop_gradient_tape.yaml")
INT_MODEL = ("gradflow: 1\ninputs:\n  idx: {shape: [3], dtype: int}\nparams:\n  w: {shape: [4]}\n"
             "graph:\n  loss: sum(take(w, idx))\nlosses:\n  loss: {wrt: [w]}\n")
MINIMAL = "gradflow: 1\nparams:\n  w: {value: 1.0}\ngraph:\n  z: w * w\nlosses: [z]\n"
BIG = "gradflow: 1\nparams:\n  w: {shape: [134217728]}\ngraph:\n  z: sum(w)\nlosses: [z]\n"   # 1 GiB

# Runs the cases in-process with click's test runner, one after another, timing each.
DRIVER = r"""
import json, sys, time
from click.testing import CliRunner
from gradflow.cli.main import cli
results = []
for args in json.load(open(sys.argv[1])):
    start = time.monotonic()
    r = CliRunner().invoke(cli, args)
    crash = None if r.exception is None or isinstance(r.exception, SystemExit) else repr(r.exception)
    results.append({"args": args, "code": r.exit_code, "stdout": r.stdout, "stderr": r.stderr,
                    "seconds": time.monotonic() - start, "crash": crash})
json.dump(results, open(sys.argv[2], "w"))
"""


def limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def run_cases(cases: list, folder) -> list:
    """Every case in one child process with bounded memory; its stdin is /dev/zero."""
    given, taken = folder / "cases.json", folder / "results.json"
    given.write_text(json.dumps([[str(a) for a in args] for args in cases]))
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "COLUMNS": "100"}
    with open("/dev/zero", "rb") as zero:
        child = subprocess.run([sys.executable, "-c", DRIVER, str(given), str(taken)], cwd=ROOT, env=env,
                               stdin=zero, capture_output=True, text=True, preexec_fn=limited,
                               timeout=30 + 3 * len(cases))
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(taken.read_text())


def assert_contract(r: dict) -> None:
    where = f"gradflow {' '.join(r['args'])}"
    assert r["crash"] is None, f"{where}: {r['crash']}"
    assert "Traceback" not in r["stderr"] and "internal error" not in r["stderr"], f"{where}: {r['stderr']}"
    assert "allow_pickle" not in r["stderr"], f"{where}: numpy's advice reached the user"
    assert r["seconds"] < SECONDS, f"{where}: took {r['seconds']:.2f} s"
    assert not RAW_CONTROL.search(r["stderr"] + r["stdout"]), f"{where}: raw control character"
    lines = [line for line in r["stderr"].splitlines() if ": warning: " not in line]
    if r["code"] == 2 and "Usage:" in r["stderr"]:
        assert "Error: " in r["stderr"], where
    elif r["code"] == 2:
        assert len(lines) == 1, f"{where}: {r['stderr']!r}"
        assert LOCATED.fullmatch(lines[0]) or NOTHING_FOUND.fullmatch(lines[0]), f"{where}: {lines[0]!r}"
    else:
        assert r["code"] in (0, 1) and lines == [], f"{where}: {r['code']} {r['stderr']!r}"


# -- weights ---------------------------------------------------------------------------

DESCRS = ["<f8", "<f4", ">f8", "<f2", "<i8", "<u8", "|u1", "|b1", "|O", "<U5", "|S3", "<c16", "|V8",
          "<M8[s]", "[('a', '<f8')]", "{'bad': 1}", "<f8 junk", "'<f8'", ""]
SHAPES = [(), (3,), (4,), (10 ** 12,), (2 ** 62, 2 ** 62), (-1,), (0,), (3, 0), (1,) * 40]
MEMBER_NAMES = ["x.npy", "y.npy", "idx.npy", "w.npy", "x", "x.NPY", "dir/", "dir/x.npy", "../x.npy",
                "/abs.npy", "\x1b[2J.npy", "x\n.npy", "\u202ex.npy", ".npy", "x.npy.npy"]


def header(rng) -> bytes:
    buf = io.BytesIO()
    descr = rng.choice(DESCRS)
    shape = rng.choice(SHAPES) if rng.random() < 0.9 else "'not a shape'"
    text = "{'descr': %s, 'fortran_order': %s, 'shape': %s, }" % (
        descr if descr.startswith(("[", "{", "'")) else repr(descr), rng.choice(["False", "True", "1"]),
        shape)
    body = text.encode("latin1") + b" " * (rng.randrange(64) if rng.random() < 0.8 else 70000) + b"\n"
    major = rng.choice([1, 1, 2, 3]) if len(body) < 65536 else 2
    length = len(body).to_bytes(2 if major == 1 else 4, "little")
    buf.write(npy.MAGIC_PREFIX + bytes([major, 0]) + length + body)
    return buf.getvalue()


def archive_bytes(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def bad_weights(rng) -> bytes:
    with warnings.catch_warnings():   # zipfile warns about the duplicate names it is asked to write
        warnings.simplefilter("ignore")
        return random_weights(rng)


def random_weights(rng) -> bytes:
    good = archive_bytes({"x": np.array(5.0), "y": np.array(1.0), "idx": np.array([0, 1, 2])})
    kind = rng.choice(["bytes", "truncated", "flipped", "header", "names", "dtype", "pickle", "npy"])
    if kind == "bytes":
        return rng.randbytes(rng.randrange(0, 4096))
    if kind == "truncated":
        return good[:rng.randrange(len(good))]
    if kind == "flipped":
        data = bytearray(good)
        for _ in range(rng.randrange(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=rng.choice([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])) as z:
        pool = MEMBER_NAMES if kind == "names" else ["x.npy", "y.npy", "idx.npy"]
        names = ([rng.choice(pool) for _ in range(3)] if kind == "names"
                 else rng.sample(pool, rng.randrange(1, 4)))
        for name in names:
            if kind == "dtype":
                dtype = rng.choice(["int8", "uint64", "bool", "complex128", "U3", "float16", "datetime64[s]",
                                    "f8,i4", "V4", "float32"])
                data = archive_bytes({"a": np.zeros(rng.choice([(), (3,)]), dtype=dtype)})
                member = zipfile.ZipFile(io.BytesIO(data)).read("a.npy")
            elif kind == "pickle":
                member = archive_bytes({"a": np.array([{"a": 1}, None], dtype=object)})
            else:
                member = header(rng) + rng.randbytes(rng.choice([0, 8, 24, 100]))
            with z.open(name, "w", force_zip64=rng.random() < 0.2) as f:
                f.write(member)
    data = buf.getvalue()
    if kind == "npy":
        out = io.BytesIO()
        np.save(out, np.zeros(rng.choice([(), (3,)])))
        return out.getvalue()
    return data


def test_fuzz_weights_archives_end_in_one_located_line(tmp_path):
    rng = random.Random(SEED)
    int_model = tmp_path / "int.yaml"
    int_model.write_text(INT_MODEL)
    cases = []
    for k in range(120):
        path = tmp_path / f"w{k}.npz"
        path.write_bytes(bad_weights(rng))
        model = TAPE if k % 2 else int_model
        cases.append(["analyze", model, "--weights", path, "--format", "json"])
    results = run_cases(cases, tmp_path)
    for r in results:
        assert_contract(r)
        if r["code"] == 0:
            json.loads(r["stdout"])
    assert sum(r["code"] == 2 for r in results) > 90   # the generator makes mostly bad archives


def npy_header(shape) -> bytes:
    buf = io.BytesIO()
    npy.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": shape})
    return buf.getvalue()


# -- kinds of file ----------------------------------------------------------------------

def special_files(folder) -> dict:
    os.mkfifo(folder / "fifo.yaml")
    os.mkfifo(folder / "pipe.npz")
    with open(folder / "sparse.yaml", "wb") as f:
        f.truncate(20 * 1024 ** 3)
    with open(folder / "big.yaml", "wb") as f:
        f.write(b"gradflow: 1\n" + b"#" * (17 * 1024 * 1024) + b"\n")
    (folder / "dangling.yaml").symlink_to(folder / "nowhere")
    (folder / "loop.yaml").symlink_to(folder / "loop.yaml")
    (folder / "zero.yaml").symlink_to("/dev/zero")
    (folder / "dir.yaml").mkdir()
    (folder / "binary.yaml").write_bytes(bytes(range(256)) * 4)
    (folder / "mem.yaml").symlink_to("/proc/self/mem")
    write_zip_bomb(folder / "bomb.npz", "x.npy", npy_header((1 << 27,)), 1024)   # 1 GiB in 1 MiB
    write_zip_bomb(folder / "fits.npz", "w.npy", npy_header((1 << 27,)), 1024)   # the shape of BIG's w
    (folder / "big_param.yml").write_text(BIG)
    return {name: folder / name for name in os.listdir(folder)}


def test_fuzz_special_files_are_refused_fast_in_bounded_memory(tmp_path):
    files = special_files(tmp_path)
    models = [files[n] for n in sorted(files) if n.endswith(".yaml")]
    models += ["/dev/zero", "/dev/stdin", "/dev/null"]
    archives = [files["pipe.npz"], files["bomb.npz"], files["sparse.yaml"], files["dir.yaml"], "/dev/zero",
                "/dev/stdin", files["mem.yaml"]]
    cases = [[command, m] for m in models for command in ("analyze", "check", "why", "graph", "gradcheck")]
    cases += [["analyze", TAPE, "--weights", w] for w in archives]
    targets = ("/dev/null", files["fifo.yaml"], files["dir.yaml"])
    cases += [["analyze", TAPE, "--save-grads", t] for t in targets]
    cases.append(["analyze", files["big_param.yml"], "--weights", files["fits.npz"]])   # memory estimate
    results = run_cases(cases + [["analyze", files["big_param.yml"], "--weights", files["fits.npz"],
                                  "--structural", "--format", "json"]], tmp_path)
    for r in results[:-1]:
        if r["args"][0] == "why" and r["code"] == 2 and "Missing argument" in r["stderr"]:
            continue
        assert_contract(r)
        assert r["code"] == 2, r
    assert "a numeric run needs about 3 GiB" in results[-2]["stderr"]
    assert_contract(results[-1])
    assert results[-1]["code"] == 0   # structural: the archive's data is never read


def test_fuzz_directory_of_special_files_reports_each_once(tmp_path):
    scan = tmp_path / "scan"
    scan.mkdir()
    files = special_files(scan)
    (scan / "good.yaml").write_text(MINIMAL)
    (scan / "sub").mkdir()
    (scan / "sub" / "up").symlink_to(scan)
    [r] = run_cases([["check", scan, "--format", "json"]], tmp_path)
    doc = json.loads(r["stdout"])
    errors = [line for line in r["stderr"].splitlines() if ": warning: " not in line]
    # dir.yaml is a directory (walked); sparse.yaml and binary.yaml are read (16 MiB at most)
    # and hold no gradflow key; big.yaml is a model too large to load.
    read = ("dir.yaml", "sparse.yaml", "binary.yaml")
    unreadable = [n for n in files if n.endswith(".yaml") and n not in read]
    unreadable.append("big_param.yml")   # readable, and refused by the memory estimate
    assert r["code"] == 2 and r["seconds"] < SECONDS and "internal error" not in r["stderr"]
    assert sorted(LOCATED.fullmatch(e)["path"].rsplit("/", 1)[1] for e in errors) == sorted(unreadable)
    assert doc["summary"]["files"] == len(unreadable) + 1   # and good.yaml
    assert str(scan / "good.yaml") in [f["model"]["path"] for f in doc["files"]]


# -- file names ------------------------------------------------------------------------

NAME_PIECES = ["\n", "\r", "\t", "\x1b[2J", "\x1b]0;title\x07", "\x7f", "\x9b", "\u202e", "\u2066", "\u2028",
               "\ufffe",
               " ", "é", ":", ",", "%", "&", "<", ">", '"', "'", "]]>", "--", "::error", "\\"]


def random_name(rng) -> bytes:
    text = "".join(rng.choice(NAME_PIECES + ["m", "o", "d"]) for _ in range(rng.randrange(1, 6)))
    raw = text.encode("utf-8")
    if rng.random() < 0.3:   # a byte that is not UTF-8
        raw += bytes([rng.choice([0x80, 0xff, 0xc3])])
    return raw + rng.choice([b".yaml", b".yml"])


def test_fuzz_file_names_are_escaped_in_every_format(tmp_path):
    rng = random.Random(SEED)
    scan = tmp_path / "scan"
    scan.mkdir()
    bad = set()
    for k in range(12):
        name = os.path.join(os.fsencode(scan), random_name(rng))
        if os.path.exists(name):
            continue
        with open(name, "w") as f:
            f.write(MINIMAL if k % 2 else MINIMAL.replace("w * w", "w * nope"))
        if not k % 2:
            bad.add(name)
    formats = ("text", "json", "junit", "sarif", "github", "markdown")
    cases = [["check", scan, "--format", fmt] for fmt in formats]
    cases.append(["check", scan, "-j", "2"])
    for r in run_cases(cases, tmp_path):
        assert r["code"] == 2 and "internal error" not in r["stderr"] and r["crash"] is None
        assert not RAW_CONTROL.search(r["stderr"] + r["stdout"]), r["args"]
        assert len(r["stderr"].splitlines()) == len(bad)
        assert all(LOCATED.fullmatch(line) for line in r["stderr"].splitlines())
        fmt = r["args"][-1]
        if fmt in ("json", "sarif"):
            json.loads(r["stdout"])
        if fmt == "junit":
            assert len(ET.fromstring(r["stdout"])) == 12 - (12 - len(os.listdir(scan)))
        if fmt == "github":
            assert len(r["stdout"].splitlines()) == len(bad)


@pytest.mark.parametrize("count", [3])
def test_fuzz_generators_make_what_they_say(tmp_path, count):
    rng = random.Random(SEED)
    kinds = {bad_weights(rng)[:4] for _ in range(50)}
    assert b"PK\x03\x04" in kinds and len(kinds) > count   # archives and other things
    assert all(random_name(rng).endswith((b".yaml", b".yml")) for _ in range(20))
