"""aten's scans, sorts and scatters -> gradflow expressions."""

from __future__ import annotations

SCAN_OPS: dict = {}
