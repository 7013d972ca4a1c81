"""The [tool.gradflow] table of a pyproject.toml's text, and where a key of it is written.

Text only: which files may hold the table (so others are never parsed), the table itself
(tomllib; a few simple keys by hand on Python 3.10), and the place of a key in any of
TOML's spellings of it, for errors. ``settings`` checks the values.
"""

from __future__ import annotations

import bisect
import re

from gradflow.errors import ModelError

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
        at_end = "(at end of document)" in str(e)
        if at_end:      # an unclosed [ or string: after the last text
            lines = text.rstrip().split("\n")
            line, col = len(lines), len(lines[-1]) + 1
        message = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", str(e)) or "invalid TOML"
        message += " at the end of the file" if at_end else ""
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
