"""Reading the files a model run reads: at most a limit, as one read of that many bytes would."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from gradflow.model import files
from gradflow.model.files import read_at_most


@pytest.mark.parametrize("size", [0, 1, 9, 10, 11, 50])
@pytest.mark.parametrize("grown", [0, 1, 5, 100])
def test_read_at_most_reads_what_one_read_of_that_many_bytes_reads(tmp_path, monkeypatch, size, grown):
    path = tmp_path / "m.yaml"
    path.write_bytes(bytes(range(size)) + b"x" * grown)
    with open(path, "rb") as f:
        expected = f.read(11)
    # The file had ``size`` bytes when its size was taken and grew by ``grown`` since.
    monkeypatch.setattr(files.os, "fstat", lambda fd: SimpleNamespace(st_size=size))
    with open(path, "rb") as f:
        assert read_at_most(f, 11) == expected


def test_read_at_most_reads_a_file_whose_size_says_nothing():
    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc")
    with open("/proc/self/status", "rb") as f:
        assert os.fstat(f.fileno()).st_size == 0
        assert read_at_most(f, 1 << 20).startswith(b"Name:")
