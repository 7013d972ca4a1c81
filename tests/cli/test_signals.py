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


def checking(folder, jobs: str):
    """A `check -j JOBS` of slow models, well inside its first files: (process, worker pids)."""
    for k in range(4):
        (folder / f"slow{k}.yaml").write_text(SLOW)
    process = gradflow("check", folder, "-j", jobs, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while jobs != "1" and len(children(process.pid)) < int(jobs) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.5)   # each file takes seconds
    assert process.poll() is None, "the check ended before it could be interrupted"
    return process, children(process.pid)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_prints_one_line_stops_workers_and_exits_130(tmp_path, jobs):
    process, workers = checking(tmp_path, jobs)
    sent = time.monotonic()
    os.killpg(process.pid, signal.SIGINT)   # as a terminal does: the whole process group
    out, err = process.communicate(timeout=30)
    took = time.monotonic() - sent
    assert process.returncode == 130
    assert err == b"gradflow: interrupted\n" and out == b""
    assert took < 1.0, f"took {took:.2f} s to stop"
    assert [w for w in workers if alive(w)] == []


def test_ctrl_c_to_the_main_process_alone_still_stops_the_workers(tmp_path):
    process, workers = checking(tmp_path, "2")
    os.kill(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130 and err == b"gradflow: interrupted\n"
    time.sleep(1.0)
    assert workers and [w for w in workers if alive(w)] == []


def test_ctrl_c_pressed_repeatedly_still_prints_one_line(tmp_path):
    process, workers = checking(tmp_path, "2")
    for _ in range(5):
        os.killpg(process.pid, signal.SIGINT)
        time.sleep(0.002)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130 and err == b"gradflow: interrupted\n"
    time.sleep(0.5)
    assert [w for w in workers if alive(w)] == []


# One matrix product that takes seconds (zeros: no time drawing values first). Python runs
# signal handlers only between bytecodes, so without a watchdog Ctrl-C waited for it.
LONG_CALL = """
gradflow: 1
dims: {n: 4000}
params:
  a: {shape: [n, n], init: zeros}
  b: {shape: [n, n], init: zeros}
graph:
  loss: mean(a @ b)
losses:
  loss: {wrt: [a]}
"""


def test_ctrl_c_inside_a_long_numpy_call_still_ends_within_a_second(tmp_path):
    (tmp_path / "long.yaml").write_text(LONG_CALL)
    process = gradflow("analyze", tmp_path / "long.yaml", "--no-counterfactual", stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    time.sleep(1.0)   # inside the product (it took 1.4 s more to stop here)
    assert process.poll() is None
    sent = time.monotonic()
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=60)
    took = time.monotonic() - sent
    assert process.returncode == 130 and err == b"gradflow: interrupted\n" and out == b""
    assert took < 1.0, f"took {took:.2f} s to stop"


GAN = MODELS / "gan.yaml"
COMMANDS = [["check", MODELS, "--format", fmt] for fmt in ("text", "json", "junit", "sarif", "markdown")] + [
    ["check", MODELS, "-j", "2"], ["analyze", GAN], ["analyze", GAN, "--format", "json"],
    ["analyze", GAN, "--format", "markdown"], ["why", GAN, "G.w1"], ["graph", GAN], ["graph", GAN, "--format", "dot"],
    ["gradcheck", MODELS / "stop_gradient_tape.yaml"], ["ops"], ["schema"]]


@pytest.mark.parametrize("args", COMMANDS + [["--help"], ["--version"], ["check", "--help"]],
                         ids=lambda a: " ".join(str(x).rsplit("/", 1)[-1] for x in a))
def test_closed_stdout_ends_quietly(args):
    read, write = os.pipe()
    os.close(read)   # the reader is gone before the first byte is written
    process = gradflow(*args, stdout=write, stderr=subprocess.PIPE)
    os.close(write)
    _, err = process.communicate(timeout=60)
    assert err == b"" and process.returncode == 141


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs a device that is always full")
@pytest.mark.parametrize("args", COMMANDS + [["--help"], ["--version"], ["check", "--help"]],
                         ids=lambda a: " ".join(str(x).rsplit("/", 1)[-1] for x in a))
def test_output_that_cannot_be_written_is_one_error_line(args):
    with open("/dev/full", "wb") as full:
        process = gradflow(*args, stdout=full, stderr=subprocess.PIPE)
        _, err = process.communicate(timeout=60)
    assert err == b"gradflow: error: cannot write the output: No space left on device\n"
    assert process.returncode == 2


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs a device that is always full")
def test_output_that_cannot_be_written_shows_where_with_debug():
    with open("/dev/full", "wb") as full:
        process = gradflow("--debug", "check", MODELS / "dead_relu.yaml", stdout=full, stderr=subprocess.PIPE)
        _, err = process.communicate(timeout=60)
    lines = err.decode().splitlines()
    assert lines[0] == "Traceback (most recent call last):" and "OSError: [Errno 28]" in lines[-2]
    assert lines[-1] == "gradflow: error: cannot write the output: No space left on device"
    assert process.returncode == 2


def test_head_closing_the_pipe_leaves_stderr_empty():
    script = f"{sys.executable} -m gradflow.cli.main check {MODELS} --format json | head -c 10"
    result = subprocess.run(["bash", "-c", "set -o pipefail; " + script], cwd=ROOT, capture_output=True)
    assert result.stdout == b'{\n  "forma' and result.stderr == b""
    assert result.returncode in (0, 141)
