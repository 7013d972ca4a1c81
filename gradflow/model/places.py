"""Where each character of an expression's text stands in the model file.

Most expressions are a verbatim piece of one line, so a character's column is the
scalar's column plus its index. YAML can also fold a long expression over several
lines, strip a block scalar's indentation, unescape a quoted string or (in
``source._TreeBuilder._rejoined``) put back a call split at its commas. Those change
whitespace and a few marks only, so the non-blank characters of the value are
found, in order, in the scalar's source text.
"""

from __future__ import annotations

from gradflow.model.spec import Place

# How far to look for the next character past marks YAML removed (quotes, escapes).
MAX_SKIPPED = 12


class TextPlaces:
    """File (line, col) of the characters of ``text``, a scalar's value starting at ``origin``."""

    def __init__(self, text: str, origin: Place, quoted: bool = False, raw: str | None = None):
        self.origin, self.shift = origin, int(quoted)
        self.lead = len(text) - len(text.lstrip())
        # Start of each line of the stripped text, which is what the parser sees.
        self.lines = text.strip().split("\n")
        self.starts = [0]
        for line in self.lines[:-1]:
            self.starts.append(self.starts[-1] + len(line) + 1)
        self.places = align(raw, origin, text) if raw else None

    def same_line(self) -> tuple[int, int | None]:
        """(line, column of the first character) when every character of the text is one
        column of one line (verbatim ASCII on one line), else (line, None)."""
        if self.places is None and len(self.lines) == 1 and self.lines[0].isascii():
            return self.origin.line, self.origin.col + self.shift + self.lead
        return self.origin.line, None

    def at(self, index: int) -> tuple[int, int]:
        """The place of text[index] (clamped to the text)."""
        if self.places:
            return self.places[min(max(index, 0), len(self.places) - 1)]
        return self.origin.line, self.origin.col + self.shift + max(index, 0)

    def at_char(self, lineno: int, char: int) -> tuple[int, int]:
        """The place of character ``char`` (0-based) of line ``lineno`` (1-based) of the stripped text."""
        row = min(max(lineno, 1), len(self.lines)) - 1
        return self.at(self.lead + self.starts[row] + char)

    def at_node(self, lineno: int, col_offset: int) -> tuple[int, int]:
        """The place of an ``ast`` position (its col_offset counts UTF-8 bytes)."""
        row = min(max(lineno, 1), len(self.lines)) - 1
        prefix = self.lines[row].encode("utf-8")[:col_offset]
        return self.at_char(lineno, len(prefix.decode("utf-8", errors="ignore")))


def align(raw: str, origin: Place, value: str) -> list[tuple[int, int]]:
    """The place of every character of value, matched in order in its source text raw."""
    line, col, i = origin.line, origin.col, 0
    if raw[:1] in ("|", ">") and "\n" in raw:   # a block scalar's text starts on the next line
        i, line, col = raw.index("\n") + 1, line + 1, 1
    places: list = []
    for char in value:
        j = None if char.isspace() else find(raw, i, char)
        if j is None:
            if not char.isspace():   # an escape made it (\x62): at the escape, past the blanks before it
                while i < len(raw) and raw[i].isspace():
                    line, col = (line + 1, 1) if raw[i] == "\n" else (line, col + 1)
                    i += 1
            places.append(None if char.isspace() else (line, col))
            continue
        for c in raw[i:j]:
            line, col = (line + 1, 1) if c == "\n" else (line, col + 1)
        places.append((line, col))
        i, col = j + 1, col + 1
    # A blank stands where the next character does (an indent, a line break), or the last.
    following = (line, col)
    for k in range(len(places) - 1, -1, -1):
        following = places[k] = places[k] or following
    return places


def find(raw: str, start: int, char: str) -> int | None:
    """Index of char at or after start, past blanks and a few removed marks; None if not near."""
    skipped, end = 0, min(len(raw), start + 4096)
    for j in range(start, end):
        if raw[j] == char:
            return j
        if not raw[j].isspace():
            skipped += 1
            if skipped > MAX_SKIPPED:
                return None
    return None
