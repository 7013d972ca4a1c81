"""A model file's text before YAML reads it, and YAML's own errors in the format's words.

Characters that would shift every place after them, or make the file read differently
from how it displays, are refused up front at their line and column; the parser's
messages get what they leave out (a tab, where an unclosed bracket began).
"""

from __future__ import annotations

import codecs
import re

import yaml

from gradflow.errors import ModelError

MAX_CHARS = 16 * 1024 * 1024

# The patterns below are compiled on first use (into re's cache), each only for text
# that needs it: the first one alone takes most of a millisecond to compile.

# The characters neither YAML reader accepts (the complement of YAML's printable set),
# checked up front so the error has a place. Listed as they are, not as a negated
# class over all of Unicode: that one takes milliseconds to compile at every start.
_NOT_PRINTABLE = "[\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x84\x86-\x9F\uD800-\uDFFF\uFFFE\uFFFF]"
_NOT_ALLOWED = "is not allowed in YAML"

_OPENED = r"while (?:parsing|scanning) an? (.+)"

# YAML counts these as line breaks and editors do not: every line number after one would be off.
_ODD_BREAKS = "[\x85\u2028\u2029]"
# Bidirectional embeddings, overrides and isolates make code display in another order than
# it is read ("trojan source"); refused anywhere in the file, as rustc refuses them.
_BIDI = "[\u202a-\u202e\u2066-\u2069]"
# Each pattern with what its character is; only the first can match ASCII text, the usual
# case, which is checked for the ASCII part of that class alone (quick to compile).
_TEXT_CHECKS = ((_NOT_PRINTABLE, _NOT_ALLOWED),
                (_ODD_BREAKS, "is a line break to YAML but not to editors; remove it"),
                (_BIDI, "changes the direction of the text around it, so the file reads "
                        "differently from how it displays; remove it"))
_ASCII_CHECKS = (("[\x00-\x08\x0B\x0C\x0E-\x1F\x7F]", _NOT_ALLOWED),)


def as_text(data: str | bytes, path: str) -> str:
    if len(data) > MAX_CHARS:
        raise ModelError("model file is larger than 16 MiB", path, 1, 1)
    if isinstance(data, (bytes, bytearray)):
        data = _decode_utf8(bytes(data), path)
    if "\r" in data:   # YAML reads CR and CRLF as line breaks; the places found below count "\n"
        data = data.replace("\r\n", "\n").replace("\r", "\n")
    for pattern, why in _TEXT_CHECKS if not data.isascii() else _ASCII_CHECKS:
        bad = re.search(pattern, data)
        if bad:
            index = bad.start()
            raise ModelError(f"character U+{ord(bad.group()):04X} {why}", path,
                             data.count("\n", 0, index) + 1, index - data.rfind("\n", 0, index))
    return data


def _decode_utf8(data: bytes, path: str) -> str:
    data = data.removeprefix(codecs.BOM_UTF8)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if data.startswith((b"PK\x03\x04", b"\x93NUMPY")):   # what a model is mistaken for most
            raise ModelError("this is a numpy or torch.save archive, not a model file: a model is YAML "
                             "(weights are given with --weights FILE.npz)", path, 1, 1) from None
        start = exc.start
        line = data.count(b"\n", 0, start) + 1
        # Everything before the first bad byte decodes, so the column counts characters.
        col = len(data[data.rfind(b"\n", 0, start) + 1:start].decode("utf-8")) + 1
        raise ModelError(f"file is not valid UTF-8 (byte 0x{data[start]:02x})",
                         path, line, col) from None


def yaml_error(exc: yaml.YAMLError, path: str, text: str = "") -> ModelError:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context
        if mark is not None and problem:
            return error_at(f"invalid YAML: {problem}{_yaml_hint(exc, mark, text)}", path, mark)
    return ModelError("invalid YAML: " + " ".join(str(exc).split()), path, 1, 1)


def _yaml_hint(exc, mark, text: str) -> str:
    """What the parser's own words leave out: a tab, or where the unclosed part began."""
    lines = text.split("\n")
    line = lines[mark.line] if mark.line < len(lines) else ""
    if line[mark.column:mark.column + 1] == "\t":
        return " (a tab: YAML is indented with spaces)"
    start, opened = exc.context_mark, re.match(_OPENED, exc.context or "")
    if opened and start is not None and exc.problem and start.line != mark.line:
        return f" (in the {opened.group(1)} that starts at line {start.line + 1}, column {start.column + 1})"
    return ""


def error_at(message: str, path: str, mark) -> ModelError:
    return ModelError(message, path, mark.line + 1, mark.column + 1)
