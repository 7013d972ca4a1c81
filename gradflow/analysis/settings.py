"""The rule ids, their settings, and where settings come from.

Layers, lowest precedence first: the defaults, ``[tool.gradflow]`` in the nearest
``pyproject.toml``, the model file's ``check:`` block, then the command line. For
each rule the highest layer that names it (in ``select`` or ``ignore``) decides:
``--select GF102`` on the command line turns GF102 back on where pyproject ignores
it. Every value is checked where it is written: an unknown key or rule id, a wrong
type or an out-of-range number is an error at its place, never skipped. The thresholds
are checked merged too: a ``vanishing`` not below the ``exploding`` it meets, whichever
layers they come from, is an error at the higher one.
"""

from __future__ import annotations

import errno
import math
import os
import re
import stat
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import NamedTuple

from gradflow.analysis.pyproject import key_place, may_hold_tool_gradflow, tool_table
from gradflow.errors import ModelError, did_you_mean

# rule id -> (default severity, one-line description)
RULES = {
    "GF100": ("error", "an expect assertion does not hold"),
    "GF101": ("error", "an expect or wrt glob matches no parameter"),
    "GF102": ("error", "a trainable parameter receives gradient from no loss at all"),
    "GF103": ("error", "a parameter in a loss's wrt receives no gradient from that loss"),
    "GF104": ("warning", "a loss sends gradient into a parameter outside its wrt"),
    "GF105": ("error", "a loss or gradient is NaN or infinite"),
    "GF106": ("warning", "a stop-gradient is redundant"),
    "GF107": ("warning", "a path exists but the gradient is exactly zero"),
    "GF108": ("warning", "vanishing gradient: norm below the vanishing setting"),
    "GF109": ("warning", "exploding gradient: norm above the exploding setting"),
    "GF110": ("error", "a loss is wired to no parameter: it trains nothing"),
}
# The rules that judge gradient values, which a --structural run does not compute: there they never fire.
NUMERIC_RULES = frozenset({"GF105", "GF107", "GF108", "GF109"})
KEYS = ("select", "ignore", "strict", "vanishing", "exploding", "max-memory")
THRESHOLDS = ("vanishing", "exploding")
GIB = 1024 ** 3
SIZE = r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMGT]i?B?|B)?\s*\Z"   # compiled on first use
UNITS = {"": 1, "B": 1, "K": 1e3, "KB": 1e3, "KIB": 1024, "M": 1e6, "MB": 1e6, "MIB": 1024 ** 2,
         "G": 1e9, "GB": 1e9, "GIB": GIB, "T": 1e12, "TB": 1e12, "TIB": 1024 ** 4}


class SettingsError(ValueError):
    """A bad setting; ``key`` names the setting it is about, for its place."""

    def __init__(self, message: str, key: str | None = None, index: int | None = None):
        super().__init__(message)
        self.message, self.key, self.index = message, key, index   # index: of an item in a list


class Layer(NamedTuple):
    """One layer's checked settings, and where its thresholds are written (for the error
    when they cross another layer's)."""
    values: dict
    path: str | None = None      # None: the command line, or the settings given to the API
    places: dict | None = None   # "vanishing"/"exploding" -> (line, col) in path


@dataclass(unsafe_hash=True)   # hashed as when it was frozen; not frozen: that costs start-up
class Settings:
    """The settings one model is checked with: every layer merged (see ``settings_for``)."""
    rules: tuple = ()               # ((rule id, on?), ...): the last word of the layers on each rule
    strict: bool = False            # warnings fail too
    vanishing: float = 1e-7
    exploding: float = 1e3
    max_memory: float = 2 * GIB

    def severity(self, rule: str) -> str:
        """A rule's severity: its default, unless a layer turned it off."""
        return RULES[rule][0] if dict(self.rules).get(rule, True) else "off"

    @property
    def ignore(self) -> tuple:
        return tuple(rule for rule, on in self.rules if not on)

    def merged(self, values: dict) -> "Settings":
        """These settings overridden by one layer (already checked by ``checked``)."""
        changes, rules = {}, dict(self.rules)
        for key, value in values.items():
            if key in ("select", "ignore"):
                rules.update({rule: key == "select" for rule in value})
            else:
                changes[key.replace("-", "_")] = value
        return replace(self, rules=tuple(sorted(rules.items())), **changes)


def checked(values: dict) -> dict:
    """One layer's settings, validated and normalised; SettingsError names the bad key."""
    out = {}
    for key, value in values.items():
        if key not in KEYS:
            raise SettingsError(f"unknown setting {key!r}{did_you_mean(key, KEYS)}", key)
        if key in ("select", "ignore"):
            out[key] = rule_ids(value, key)
        elif key == "strict":
            if not isinstance(value, bool):
                raise SettingsError(f"strict must be true or false, not {spelled(value)}", key)
            out[key] = value
        elif key == "max-memory":
            out[key] = size(value, key)
        else:
            out[key] = positive(value, key)
    both = set(out.get("select", ())) & set(out.get("ignore", ()))
    if both:
        raise SettingsError(f"{sorted(both)[0]} is both selected and ignored", "select")
    if out.get("vanishing", 0) >= out.get("exploding", math.inf):   # swapped: every norm would be odd
        raise SettingsError(f"vanishing ({values['vanishing']!r}) must be below exploding "
                            f"({values['exploding']!r})", "vanishing")
    return out


def spelled(value) -> str:
    """A settings value as TOML and YAML write it: true, not Python's True."""
    return ("true" if value else "false") if isinstance(value, bool) else repr(value)


def rule_ids(value, key: str = "select") -> tuple:
    """'GF102, GF106' or a list of ids -> ('GF102', 'GF106'); unknown ids refused."""
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = value
    else:
        raise SettingsError(f"{key} must be a list of rule ids like ['GF106'], not {spelled(value)}", key)
    ids = []
    for index, item in enumerate(i.strip().upper() for i in items):
        if not item:
            continue
        if item not in RULES:
            raise SettingsError(f"{key}: unknown rule id {item!r}{did_you_mean(item, RULES)}", key, index)
        ids.append(item)
    return tuple(ids)


def positive(value, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SettingsError(f"{key} must be a number, not {spelled(value)}", key)
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or number <= 0:
        raise SettingsError(f"{key} must be a positive finite number, got {spelled(value)}", key)
    return number


def size(value, key: str = "max-memory") -> float:
    """A number of bytes, or a size such as '512MiB' or '2GB'."""
    if isinstance(value, str):
        match = re.match(SIZE, value, re.IGNORECASE)
        unit = (match.group(2) or "").upper() if match else None
        if match is None or unit not in UNITS:
            raise SettingsError(f"{key} must be a size such as 512MiB or 2GB, not {spelled(value)}", key)
        number = float(match.group(1)) * UNITS[unit]
        if not 0 < number < math.inf:     # named as written: '0KB', not 0.0
            raise SettingsError(f"{key} must be a finite size above zero such as 512MiB or 2GB, not {spelled(value)}", key)
        value = number
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SettingsError(f"{key} must be a number of bytes or a size such as 512MiB or 2GB, "
                            f"not {spelled(value)}", key)
    return positive(value, key)


# ---------------------------------------------------------------- pyproject.toml
def pyproject_settings(start: str) -> Layer:
    """The checked [tool.gradflow] of the nearest pyproject.toml at or above the folder ``start``
    (an absolute path without links: os.path, not pathlib, since this runs once per model)."""
    folder = start
    while True:
        candidate = os.path.join(folder, "pyproject.toml")
        try:
            info = os.stat(candidate)
        except OSError as e:   # as Path.is_file: a missing or unreachable file is no file
            if e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
                raise
            info = None
        if info is not None and stat.S_ISREG(info.st_mode):
            try:
                values, places = read_pyproject(candidate, info.st_mtime_ns)
            except ModelError as e:
                e.path = named(candidate)
                raise
            # named as shown only when it may be (with a threshold): relpath asks for the working folder
            return Layer(values, named(candidate) if places else candidate, places)
        parent = os.path.dirname(folder)
        if parent == folder:
            return Layer({})
        folder = parent


def named(path: str) -> str:
    """A pyproject.toml named as the user would, as models are: relative when below here."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


@lru_cache(maxsize=64)
def read_pyproject(path: str, mtime: int) -> tuple[dict, dict]:
    """(settings, the (line, col) of each threshold it sets): read once per file (and version
    of it), however many models sit below it."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PYPROJECT + 1)
    except OSError as e:
        raise ModelError(f"cannot read pyproject.toml: {e.strerror or e}", path, 1, 1) from None
    if len(data) > MAX_PYPROJECT:
        raise ModelError(f"pyproject.toml is larger than {MAX_PYPROJECT // 2 ** 20} MiB", path, 1, 1)
    text = data.decode("utf-8", errors="replace")
    if not may_hold_tool_gradflow(text):   # not ours to judge, and no parser to load
        return {}, {}
    try:
        table = tool_table(text, path)
    except ModelError:
        if "gradflow" in text:
            raise
        return {}, {}   # read only for its \u escapes, which may spell gradflow: not ours to judge
    if not isinstance(table, dict):
        raise ModelError("[tool.gradflow] must be a table", path, *key_place(text, None))
    try:
        values = checked(table)
    except SettingsError as e:
        raise ModelError(e.message, path, *key_place(text, e.key)) from None
    return values, {key: key_place(text, key) for key in THRESHOLDS if key in values}


MAX_PYPROJECT = 8 * 2 ** 20


def settings_for(model, overrides: dict | None = None) -> Settings:
    """Defaults, then [tool.gradflow] of the nearest pyproject.toml, then the model's
    `check:` block (checked when it was loaded), then ``overrides`` (the command line)."""
    layers = (pyproject_settings(os.path.dirname(os.path.realpath(model.path))), check_block(model),
              Layer(checked(overrides or {})))
    settings = Settings()
    for layer in layers:
        settings = settings.merged(layer.values)
    if settings.vanishing >= settings.exploding:
        raise crossed(settings, layers)
    return settings


def check_block(model) -> Layer:
    """The model's `check:` block, checked; a bad value is an error at its place in the file."""
    places = model.spec.check_places
    try:
        values = checked(model.spec.check)
    except SettingsError as e:
        place = places.get((e.key, e.index)) or places.get(e.key)
        raise ModelError(e.message, model.path, place.line if place else 1, place.col if place else 1) from None
    return Layer(values, model.path, {key: (places[key].line, places[key].col) for key in THRESHOLDS
                                      if key in values and key in places})


def crossed(settings: Settings, layers: tuple) -> Exception:
    """The error of thresholds that each layer accepts but that cross once merged: at the one
    from the higher layer (one layer's pair is checked by ``checked``), naming where the other
    comes from. A ModelError at its place, or a SettingsError when the command line set it."""
    where = {key: max((i for i, layer in enumerate(layers) if key in layer.values), default=-1)
             for key in THRESHOLDS}
    key = max(THRESHOLDS, key=where.get)
    other = "exploding" if key == "vanishing" else "vanishing"
    origin = "the default"
    if where[other] >= 0:
        lower = layers[where[other]]
        origin = "from {}:{}:{}".format(lower.path, *(lower.places or {}).get(other, (1, 1)))
    relation = "below" if key == "vanishing" else "above"
    message = (f"{key} ({getattr(settings, key)!r}) must be {relation} {other} "
               f"({getattr(settings, other)!r}, {origin})")
    layer = layers[where[key]]
    if layer.path is None:
        return SettingsError(message, key)
    return ModelError(message, layer.path, *(layer.places or {}).get(key, (1, 1)))
