"""Ctrl-C and closed pipes, with real processes and real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import MODELS, ROOT

# A model that takes seconds to check: the interrupt arrives while it runs.
SLOW = """
gradflow: 1
dims: {n: 1200}
params:
  w: {shape: [n, n]}
graph:
  a: tanh(w @ w)
  b: tanh(a @ w)
  c: tanh(b @ a)
  d: tanh(c @ b)
  e: tanh(d @ c)
  loss: mean(e @ d)
losses:
  loss: {wrt: [w]}
"""


def gradflow(*args, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "gradflow.cli.main", *map(str, args)], cwd=ROOT, env=env,
                            start_new_session=True, **kwargs)


def children(pid: int) -> list:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(c) for c in f.read().split()]
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads child processes from /proc")
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_prints_one_line_stops_workers_and_exits_130(tmp_path, jobs):
    for k in range(4):
        (tmp_path / f"slow{k}.yaml").write_text(SLOW)
    process = gradflow("check", tmp_path, "-j", jobs, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while jobs == "2" and len(children(process.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.5)   # well inside the first file (each takes seconds)
    workers = children(process.pid)
    assert process.poll() is None, "the check ended before it could be interrupted"
    sent = time.monotonic()
    os.killpg(process.pid, signal.SIGINT)   # as a terminal does: the whole process group
    out, err = process.communicate(timeout=30)
    took = time.monotonic() - sent
    assert process.returncode == 130
    assert err == b"gradflow: interrupted\n" and out == b""
    assert took < 1.0, f"took {took:.2f} s to stop"
    assert [w for w in workers if alive(w)] == []


def test_ctrl_c_to_the_main_process_alone_still_stops_the_workers(tmp_path):
    for k in range(4):
        (tmp_path / f"slow{k}.yaml").write_text(SLOW)
    process = gradflow("check", tmp_path, "-j", "2", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while len(children(process.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    workers = children(process.pid)
    os.kill(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130 and err == b"gradflow: interrupted\n"
    time.sleep(1.0)
    assert workers and [w for w in workers if alive(w)] == []


COMMANDS = [["check", MODELS, "--format", fmt] for fmt in ("text", "json", "junit", "sarif", "markdown")] + [
    ["check", MODELS, "-j", "2"], ["analyze", MODELS / "gan.yaml"], ["analyze", MODELS / "gan.yaml", "--format", "json"],
    ["analyze", MODELS / "gan.yaml", "--format", "markdown"], ["why", MODELS / "gan.yaml", "G.w1"],
    ["graph", MODELS / "gan.yaml"], ["graph", MODELS / "gan.yaml", "--format", "dot"],
    ["gradcheck", MODELS / "stop_gradient_tape.yaml"], ["ops"], ["schema"]]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(str(x).rsplit("/", 1)[-1] for x in a))
def test_closed_stdout_ends_quietly(args):
    read, write = os.pipe()
    os.close(read)   # the reader is gone before the first byte is written
    process = gradflow(*args, stdout=write, stderr=subprocess.PIPE)
    os.close(write)
    _, err = process.communicate(timeout=60)
    assert err == b"" and process.returncode == 141


def test_head_closing_the_pipe_leaves_stderr_empty():
    script = f"{sys.executable} -m gradflow.cli.main check {MODELS} --format json | head -c 10"
    result = subprocess.run(["bash", "-c", "set -o pipefail; " + script], cwd=ROOT, capture_output=True)
    assert result.stdout == b'{\n  "forma' and result.stderr == b""
    assert result.returncode in (0, 141)


def test_ctrl_c_pressed_repeatedly_still_prints_one_line(tmp_path):
    for k in range(4):
        (tmp_path / f"slow{k}.yaml").write_text(SLOW)
    process = gradflow("check", tmp_path, "-j", "2", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while len(children(process.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    workers = children(process.pid)
    for _ in range(5):
        os.killpg(process.pid, signal.SIGINT)
        time.sleep(0.002)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130 and err == b"gradflow: interrupted\n"
    time.sleep(0.5)
    assert [w for w in workers if alive(w)] == []
