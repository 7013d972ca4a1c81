"""Every benchmark, one after the other, each in its own process.

Run from the repository root:  python benchmarks/run.py [--quick]

Prints one row per figure of the performance goals (README, "Performance"): the
two sides of each comparison, the median of the per-pair ratios and the goal.
Nothing is asserted: the machines this runs on are small and noisy.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = ("cli.py", "whole_path.py", "scale.py", "engine.py")


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} cores", flush=True)
    failed = 0
    for script in SCRIPTS:
        failed |= subprocess.run([sys.executable, os.path.join(HERE, script), *args]).returncode
    return failed


if __name__ == "__main__":
    sys.exit(main())
