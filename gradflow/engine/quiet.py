"""Sweeps run quietly: numpy's floating-point complaints off and the cyclic collector paused.

Both are entered once per sweep (or per analysis), never per node.
"""

from __future__ import annotations

import functools
import gc
import warnings
from contextlib import contextmanager

import numpy as np


@contextmanager
def gc_paused():
    """The cyclic collector off until the block ends (restored as it was, even on an error).
    Recording and sweeping a tape make many objects and no garbage cycles, yet each
    collection they trigger would re-scan every node made so far: quadratic on a long tape."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def quiet():
    """numpy's floating-point complaints off: a NaN or an overflow is a finding (GF105) that
    the analysis reports, never console noise. Entered once per sweep, not per node; the collector is paused meanwhile."""
    with gc_paused(), np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def quietly(sweep):
    @functools.wraps(sweep)
    def run_quietly(*args, **kwargs):
        with quiet():
            return sweep(*args, **kwargs)
    return run_quietly
