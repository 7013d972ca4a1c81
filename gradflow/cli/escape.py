"""Text from a model file or the file system, made safe to show: ``shown(text)``.

A description, a name or a file name may hold escape sequences (clear the screen,
set the window title), line breaks (fake extra lines of output), bidirectional
overrides (text that displays differently from what it is) or bytes that are not
UTF-8. Every renderer passes such text through ``shown`` before it reaches a
terminal or a line-oriented format; what is escaped reads like a Python literal.
"""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, line and paragraph separators, direction marks and overrides,
# the lone surrogates that stand for undecodable bytes in file names, and the two
# noncharacters XML 1.0 does not allow (a file name may hold them; JUnit must parse).
# None of them is printable (str.isprintable), so printable text is returned at once and
# the patterns are compiled (into re's cache) only for text that needs them (a millisecond
# at start-up).
UNSAFE_CHARS = ("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
                "\u2066-\u2069\ud800-\udfff\ufffe\uffff]")
NAMED = {"\n": r"\n", "\r": r"\r", "\t": r"\t"}
SURROGATES = "[\ud800-\udfff]"


def _escape(match: re.Match) -> str:
    char = match.group()
    code = ord(char)
    if char in NAMED:
        return NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:   # a byte that was not UTF-8 (os.fsdecode's surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text) -> str:
    """``text`` with every control, direction-changing and undecodable character escaped."""
    text = str(text)
    return text if text.isprintable() else re.sub(UNSAFE_CHARS, _escape, text)


def encodable(text: str) -> str:
    """``text`` as valid Unicode for JSON: a lone surrogate (a file name's byte that is not
    UTF-8, or a YAML "\\ud800" escape) is written as ``\\xff`` / ``\\ud800`` text, since
    strict JSON readers refuse unpaired surrogate escapes. Other text is unchanged."""
    if text.isascii() or text.isprintable():
        return text
    return re.sub(SURROGATES, _escape, text)
