"""The rule ids, their settings, and where settings come from.

Layers, lowest precedence first: the defaults, ``[tool.gradflow]`` in the nearest
``pyproject.toml``, the model file's ``check:`` block, then the command line. For
each rule the highest layer that names it (in ``select`` or ``ignore``) decides:
``--select GF102`` on the command line turns GF102 back on where pyproject ignores
it. Every value is checked where it is written: an unknown key or rule id, a wrong
type or an out-of-range number is an error at its place, never skipped.
"""

from __future__ import annotations

import bisect
import errno
import math
import os
import re
import stat
from dataclasses import dataclass, replace
from functools import lru_cache

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
    "GF108": ("warning", "vanishing gradient: norm below `vanishing`"),
    "GF109": ("warning", "exploding gradient: norm above `exploding`"),
    "GF110": ("error", "a loss is wired to no parameter: it trains nothing"),
}
KEYS = ("select", "ignore", "strict", "vanishing", "exploding", "max-memory")
GIB = 1024 ** 3
SIZE = r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMGT]i?B?|B)?\s*\Z"   # compiled on first use
UNITS = {"": 1, "B": 1, "K": 1e3, "KB": 1e3, "KIB": 1024, "M": 1e6, "MB": 1e6, "MIB": 1024 ** 2,
         "G": 1e9, "GB": 1e9, "GIB": GIB, "T": 1e12, "TB": 1e12, "TIB": 1024 ** 4}


class SettingsError(ValueError):
    """A bad setting; ``key`` names the setting it is about, for its place."""

    def __init__(self, message: str, key: str | None = None, index: int | None = None):
        super().__init__(message)
        self.message, self.key, self.index = message, key, index   # index: of an item in a list


@dataclass(frozen=True)
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
                raise SettingsError(f"strict must be true or false, not {value!r}", key)
            out[key] = value
        elif key == "max-memory":
            out[key] = size(value, key)
        else:
            out[key] = positive(value, key)
    both = set(out.get("select", ())) & set(out.get("ignore", ()))
    if both:
        raise SettingsError(f"{sorted(both)[0]} is both selected and ignored", "select")
    return out


def rule_ids(value, key: str = "select") -> tuple:
    """'GF102, GF106' or a list of ids -> ('GF102', 'GF106'); unknown ids refused."""
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = value
    else:
        raise SettingsError(f"{key} must be a list of rule ids like ['GF106'], not {value!r}", key)
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
        raise SettingsError(f"{key} must be a number, not {value!r}", key)
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or number <= 0:
        raise SettingsError(f"{key} must be a positive finite number, got {value!r}", key)
    return number


def size(value, key: str = "max-memory") -> float:
    """A number of bytes, or a size such as '512MiB' or '2GB'."""
    if isinstance(value, str):
        match = re.match(SIZE, value, re.IGNORECASE)
        unit = (match.group(2) or "").upper() if match else None
        if match is None or unit not in UNITS:
            raise SettingsError(f"{key} must be a size such as 512MiB or 2GB, not {value!r}", key)
        value = float(match.group(1)) * UNITS[unit]
    return positive(value, key)


# ---------------------------------------------------------------- pyproject.toml
def pyproject_settings(start: str) -> dict:
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
            return read_pyproject(candidate, info.st_mtime_ns)
        parent = os.path.dirname(folder)
        if parent == folder:
            return {}
        folder = parent


@lru_cache(maxsize=64)
def read_pyproject(path: str, mtime: int) -> dict:
    """Read once per file (and version of it), however many models sit below it."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PYPROJECT + 1)
    except OSError as e:
        raise ModelError(f"cannot read pyproject.toml: {e.strerror or e}", path, 1, 1) from None
    if len(data) > MAX_PYPROJECT:
        raise ModelError(f"pyproject.toml is larger than {MAX_PYPROJECT // 2 ** 20} MiB", path, 1, 1)
    text = data.decode("utf-8", errors="replace")
    if not may_hold_tool_gradflow(text):   # not ours to judge, and no parser to load
        return {}
    try:
        table = tool_table(text, path)
    except ModelError:
        if "gradflow" in text:
            raise
        return {}   # read only for its \u escapes, which may spell gradflow: not ours to judge
    if not isinstance(table, dict):
        raise ModelError("[tool.gradflow] must be a table", path, *key_place(text, None))
    try:
        return checked(table)
    except SettingsError as e:
        raise ModelError(e.message, path, *key_place(text, e.key)) from None


MAX_PYPROJECT = 8 * 2 ** 20
# Every spelling of [tool.gradflow] in TOML (a header, a dotted key, a table under [tool] or
# in an inline `tool = {...}`, quoted or spaced parts) holds `tool . gradflow`, a [tool]
# header or `tool =`; a key written with \\u escapes may hold anything.
TOOL_GRADFLOW = r"""["']?tool["']?\s*\.\s*["']?gradflow|["']?\btool["']?\s*[\]=]|\\[uU]"""


def may_hold_tool_gradflow(text: str) -> bool:
    """False when the text of a pyproject.toml cannot define [tool.gradflow], as when it names
    gradflow only as a dependency or a script (then it is not parsed); True may be either."""
    named = "gradflow" in text or "\\u" in text or "\\U" in text   # escapes may spell it
    return named and re.search(TOOL_GRADFLOW, text) is not None


def tool_table(text: str, path: str):
    """[tool.gradflow] of a pyproject.toml's text ({} when absent); invalid TOML is an error."""
    try:
        import tomllib
    except ModuleNotFoundError:      # Python 3.10: read the few simple keys by hand
        return read_tool_table_simply(text)
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        where = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        line, col = (int(where[1]), int(where[2])) if where else (1, 1)
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(e)) or "invalid TOML"
        raise ModelError(f"pyproject.toml is not valid TOML: {message}", path, line, col) from None
    except RecursionError:
        raise ModelError("pyproject.toml is nested too deeply to read", path, 1, 1) from None
    tool = document.get("tool", {})
    return tool.get("gradflow", {}) if isinstance(tool, dict) else {}


def key_place(text: str, key: str | None) -> tuple[int, int]:
    """(line, col) of ``key = ...`` inside [tool.gradflow], else of ``key`` where any other
    spelling of the table (a dotted key, an inline table) writes it; else of the table itself."""
    inside, header = False, None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if line.startswith("["):
            inside = line.replace(" ", "") == "[tool.gradflow]"
            if inside:
                header = (number, raw.index("[") + 1)
        elif inside and key is not None and re.match(rf"['\"]?{re.escape(key)}['\"]?\s*=", line):
            return number, raw.index(line[0]) + 1
    return header or other_spelling_place(text, key)


def other_spelling_place(text: str, key: str | None) -> tuple[int, int]:
    """Where ``key`` is written after the first spelling of the table that is not a
    [tool.gradflow] header (`tool.gradflow.KEY = `, `gradflow = {KEY = ...}`, ...)."""
    spans = [m.span() for m in re.finditer(STRING_OR_COMMENT, text)]
    table = written(re.compile(TOOL_GRADFLOW), text, 0, spans)
    start = table.start() if table else 0
    if table and "gradflow" not in table[0]:   # a [tool] table or `tool = {`: its gradflow key
        start = written_at(text, "gradflow", start, spans)
    if key is not None:
        start = written_at(text, key, start, spans)
    line = text.count("\n", 0, start) + 1
    return line, start - (text.rfind("\n", 0, start) + 1) + 1


def written_at(text: str, key: str, start: int, spans: list) -> int:
    """Offset of the first ``key =`` (or ``key.``) written as a key from ``start`` on, else ``start``."""
    found = written(re.compile(rf"(?:^|(?<=[\s{{,.]))['\"]?{re.escape(key)}['\"]?\s*[=.]", re.MULTILINE),
                    text, start, spans)
    return found.start() if found else start


def written(pattern, text: str, start: int, spans: list):
    """The first match of ``pattern`` from ``start`` on that is written as TOML, not in a comment or
    a string value (``strict = "select = 1"``): it may only take in quoted keys whole. ``spans``:
    where the text's strings and comments lie (STRING_OR_COMMENT)."""
    starts = [a for a, _ in spans]
    for found in pattern.finditer(text, start):
        k = bisect.bisect_right(starts, found.start()) - 1
        a, b = spans[k] if k >= 0 else (0, 0)
        if b <= found.start() or (a == found.start() and text[a] in "'\"" and b <= found.end()):
            return found
    return None


# TOML's strings (multi-line first, escapes skipped) and comments, left to right: a `#` in a
# string starts no comment, a quote in a comment starts no string.
STRING_OR_COMMENT = r'''"""(?:[^\\]|\\[\s\S])*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|#[^\n]*'''


def read_tool_table_simply(text: str) -> dict:
    out, inside = {}, False
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("["):
            inside = line == "[tool.gradflow]"
        elif inside and "=" in line:
            key, value = (part.strip() for part in line.split("=", 1))
            if value.startswith("["):
                out[key] = re.findall(r"[\"']([^\"']*)[\"']", value)
            elif value in ("true", "false"):
                out[key] = value == "true"
            elif value[:1] in "\"'":
                out[key] = value.strip("\"'")
            else:
                try:
                    out[key] = float(value)
                except ValueError:
                    out[key] = value
    return out


def settings_for(model, overrides: dict | None = None) -> Settings:
    """Defaults, then [tool.gradflow] of the nearest pyproject.toml, then the model's
    `check:` block (checked when it was loaded), then ``overrides`` (the command line)."""
    settings = Settings().merged(pyproject_settings(os.path.dirname(os.path.realpath(model.path))))
    try:
        block = checked(model.spec.check)
    except SettingsError as e:
        places = model.spec.check_places
        place = places.get((e.key, e.index)) or places.get(e.key)
        raise ModelError(e.message, model.path, place.line if place else 1, place.col if place else 1) from None
    return settings.merged(block).merged(checked(overrides or {}))
