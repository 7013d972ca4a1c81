"""aten's losses and distances beyond those of aten_nn -> gradflow expressions."""

from __future__ import annotations

LOSS_OPS: dict = {}
