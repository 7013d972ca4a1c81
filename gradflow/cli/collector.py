"""The garbage collector around start-up: off while the libraries load, on again (over
new objects only) when a command starts its work on models.

Importing numpy, rich and the analysis makes hundreds of thousands of objects and almost
no garbage, yet the collector walks them again and again as they pile up: about a tenth
of a small check's time went there. Only the command line's entry point pauses it (a
library must not change its host's collector); ``resume`` freezes what is loaded by then,
so later passes, and the memory of forked ``-j`` workers, leave it alone.
"""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    global _paused
    _paused = True
    gc.disable()


def resume() -> None:
    """Where a command begins its work on models; nothing unless ``pause`` ran."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
