"""YAML text -> a tree of located Nodes, built safely for the model loader.

`parse_yaml` walks the parser's event stream with an explicit stack instead of
PyYAML's composer and constructor: those recurse (deep nesting would crash them),
keep the last of duplicate keys, and expand aliases without limit. Here nothing
from the file is executed, nesting, alias expansion and size are bounded before
they cost time or memory, and every problem is a ModelError at FILE:LINE:COL.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from gradflow.errors import ModelError
from gradflow.model.scalars import MAP_TAGS, SCALAR_TAGS, SEQ_TAGS, check_tag, scalar_value
from gradflow.model.yamltext import MAX_CHARS, as_text, error_at, yaml_error

MAX_DEPTH = 64
MAX_NODES = 100_000
# libyaml emits the same events about four times faster.
LOADER = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader

_EMPTY = "empty model file: expected a mapping with 'gradflow: 1'"
_KINDS = {list: "a sequence", str: "a string", bool: "a boolean", int: "an integer",
          float: "a number"}


@dataclass(slots=True, repr=False)
class Node:
    """One YAML node and where it starts (1-based). Aliases share one Node, and nothing
    changes a Node once made (not frozen only because a frozen one is 2.5 times slower to
    make, once per line of a model)."""

    value: object
    line: int
    col: int
    style: str | None = None
    keys: dict[str, tuple[int, int]] | None = None
    size: int = 1
    chars: int = field(default=0, compare=False)   # text in the subtree: what an alias of it copies
    # A string's source text when its value is not a copy of one line of the file
    # (folded, multi-line, block, escaped or rejoined), so places inside it can be found.
    raw: str | None = field(default=None, compare=False, repr=False)


def parse_yaml(text: str | bytes, path: str) -> Node:
    """Parse one model file (a single YAML document whose root is a mapping)."""
    text = as_text(text, path)
    try:
        parser = LOADER(text)
        try:
            builder = _TreeBuilder(path, text, parser.get_event)
            builder.build()
        finally:
            parser.dispose()
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc) and isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark:
            _refuse_depth(text, path, exc.problem_mark)
        raise yaml_error(exc, path, text) from exc
    return builder.finish()


def _refuse_depth(text: str, path: str, mark) -> None:
    """libyaml (PyYAML 6.0.4 on) refuses nesting past its own limit while it scans ahead,
    before the events deep enough for ours arrive: read the text up to its mark with the
    Python parser, whose events reach our limit at the level it is passed. Returns when the
    text there says nothing else (that error is then libyaml's)."""
    end = sum(len(line) + 1 for line in text.split("\n", mark.line)[:mark.line]) + mark.column
    if end > 1 << 20:    # a megabyte deep already: not worth reading twice
        return
    parser = yaml.SafeLoader(text[:end])
    try:
        _TreeBuilder(path, text, parser.get_event).build()
    except ModelError as error:
        if error.message.startswith(f"nesting deeper than {MAX_DEPTH} levels"):
            raise error from None
    except yaml.YAMLError:
        pass
    finally:
        parser.dispose()


def _is_plain(event) -> bool:
    return not event.style and event.tag is None


def _unclosed(text: str) -> int:
    return text.count("(") + text.count("[") - text.count(")") - text.count("]")


class _Frame:
    """A mapping or sequence whose end event has not arrived yet."""

    __slots__ = ("items", "keys", "key", "flow", "line", "col", "anchor", "size", "height", "chars")

    def __init__(self, is_map: bool, mark, anchor: str | None, flow: bool):
        self.items: dict | list = {} if is_map else []
        self.keys: dict[str, tuple[int, int]] | None = {} if is_map else None
        self.key: str | None = None  # a mapping key still waiting for its value
        self.flow = flow  # written [...] or {...}, where YAML splits a call at its commas
        self.line, self.col = mark.line + 1, mark.column + 1
        self.anchor, self.size, self.chars = anchor, 1, 0
        self.height = 0  # deepest child's nesting, aliases expanded


class _TreeBuilder:
    """Turns the parser's events into Nodes, one event at a time, with an explicit stack."""

    def __init__(self, path: str, text: str, get_event):
        self.path, self.text = path, text
        self.get_event = get_event  # the parser's next event, None after the last
        self.ahead: list = []  # events read past a split call (see _rejoined), not handled yet
        self.stack: list[_Frame] = []
        self.anchors: dict[str, tuple[Node, int]] = {}  # name -> (node, height)
        self.open_anchors: dict[str, int] = {}  # name -> line, node not finished
        self.total = 0  # the root's expanded size so far
        self.copied = 0  # characters of text that aliases repeat
        self.root: Node | None = None
        self.documents = 0

    def build(self) -> None:
        """Handle every event, in order."""
        handlers, ahead, get_event = _HANDLERS, self.ahead, self.get_event
        while True:
            event = ahead.pop(0) if ahead else get_event()
            if event is None:
                return
            handlers[event.__class__](self, event)

    def finish(self) -> Node:
        if self.root is None:
            raise ModelError(_EMPTY, self.path, 1, 1)
        return self.root

    def _document_start(self, event) -> None:
        if self.documents:
            raise error_at("more than one YAML document (a model file holds exactly one)",
                         self.path, event.start_mark)

    def _document_end(self, event) -> None:
        self.documents += 1
        root = self.root
        if root is None or root.value is None:
            raise ModelError(_EMPTY, self.path, 1, 1)
        if not isinstance(root.value, dict):
            kind = _KINDS.get(type(root.value), "a scalar")
            raise ModelError(f"the top level must be a mapping with 'gradflow: 1', "
                             f"not {kind}", self.path, root.line, root.col)

    def _scalar(self, event) -> None:
        if event.tag is not None:
            check_tag(event, SCALAR_TAGS, "scalar", self.path)
        top = self.stack[-1] if self.stack else None
        is_key = top is not None and top.keys is not None and top.key is None
        if is_key:
            self._take_key(event)
            if event.anchor is None:
                return  # a key is its source text; only an anchored key needs a Node
        elif top is not None and top.flow and _is_plain(event) and _unclosed(event.value) > 0:
            event = self._rejoined(event, top.keys is not None)
        mark = event.start_mark
        value = scalar_value(event, self.path)
        if type(value) is str:
            node = Node(value, mark.line + 1, mark.column + 1, event.style or None, chars=len(value),
                        raw=self._raw(event))
        else:
            node = Node(value, mark.line + 1, mark.column + 1, event.style or None)
        if event.anchor is not None:
            self._define(event.anchor, mark)
            self.anchors[event.anchor] = (node, 0)
        if not is_key:
            self._count(1, event, alias=False)
            self._attach(node, 0)

    def _rejoined(self, event, in_map: bool):
        """Undo YAML's split of a call at its commas inside a flow collection.

        In ``{shape: [n], init: randint(0, actions)}`` YAML sees the value ``randint(0``
        and then a key ``actions)`` with no value; in ``[f(a, b)]`` two items. A plain
        scalar with unclosed brackets takes the following plain pieces back (a key must
        have no value) until its brackets balance, so the format's own examples mean what
        they say.
        """
        # The pieces are joined once at the end, and the count of unclosed brackets kept up
        # piece by piece: recounting the joined text per piece made a long flow sequence
        # after an open bracket quadratic (80,000 pieces took 13 s).
        parts, last, depth = [event.value], event, _unclosed(event.value)
        while depth > 0:
            piece = self._peek(0)
            if not (isinstance(piece, yaml.ScalarEvent) and _is_plain(piece)):
                break
            if in_map:   # the piece arrived as a key: it must have no value of its own
                empty = self._peek(1)
                if not (isinstance(empty, yaml.ScalarEvent) and _is_plain(empty) and empty.value == ""):
                    break
                del self.ahead[:2]
                last = empty
            else:
                del self.ahead[:1]
                last = piece
            parts.append(piece.value)
            depth += _unclosed(piece.value)
        return yaml.ScalarEvent(event.anchor, event.tag, event.implicit, ", ".join(parts), event.start_mark,
                                last.end_mark, event.style)

    def _peek(self, k: int):
        """The event k places after the one being handled (None past the last)."""
        while len(self.ahead) <= k:
            self.ahead.append(self.get_event())
        return self.ahead[k]

    def _raw(self, event) -> str | None:
        start, end = event.start_mark.index, event.end_mark.index
        quote = 1 if event.style in ("'", '"') else 0
        if event.style in ("|", ">") or self.text[start + quote:end - quote] != event.value:
            return self.text[start:end]
        return None

    def _take_key(self, event) -> None:
        key, top, mark = event.value, self.stack[-1], event.start_mark
        # A plain "<<" is YAML 1.1's merge key; a quoted one is an ordinary string.
        if key == "<<" and not event.style and event.tag is None:
            raise error_at("merge keys are not supported", self.path, mark)
        first = top.keys.get(key)
        if first is not None:
            raise error_at(f"duplicate key '{key}' (first defined at line {first[0]})",
                         self.path, mark)
        top.keys[key] = (mark.line + 1, mark.column + 1)
        top.key = key

    def _alias(self, event) -> None:
        name = event.anchor
        if self._expects_key():
            raise error_at("an alias cannot be a mapping key", self.path, event.start_mark)
        if name not in self.anchors:
            problem = ("refers to a node that contains it" if name in self.open_anchors
                       else "is not defined")
            raise error_at(f"alias '*{name}' {problem}", self.path, event.start_mark)
        node, height = self.anchors[name]
        self._count(node.size, event, alias=True)
        self.copied += node.chars
        if self.copied > MAX_CHARS:   # one long expression repeated: few nodes, megabytes of text
            raise error_at(f"document too large after expanding aliases (more than {MAX_CHARS // 2 ** 20} "
                         "MiB of text)", self.path, event.start_mark)
        if len(self.stack) + height > MAX_DEPTH:
            raise error_at(f"nesting deeper than {MAX_DEPTH} levels after expanding "
                         f"alias '*{name}'", self.path, event.start_mark)
        self._attach(node, height)

    def _open(self, event) -> None:
        is_map = isinstance(event, yaml.MappingStartEvent)
        kind = "mapping" if is_map else "sequence"
        check_tag(event, MAP_TAGS if is_map else SEQ_TAGS, kind, self.path)
        if self._expects_key():
            raise error_at(f"a mapping key must be a scalar, not a {kind}", self.path,
                         event.start_mark)
        if len(self.stack) >= MAX_DEPTH:
            raise error_at(f"nesting deeper than {MAX_DEPTH} levels", self.path,
                         event.start_mark)
        self._count(1, event, alias=False)
        if event.anchor is not None:
            self._define(event.anchor, event.start_mark)
            self.open_anchors[event.anchor] = event.start_mark.line + 1
        self.stack.append(_Frame(is_map, event.start_mark, event.anchor, bool(event.flow_style)))

    def _close(self, event) -> None:
        frame = self.stack.pop()
        node = Node(frame.items, frame.line, frame.col, keys=frame.keys, size=frame.size, chars=frame.chars)
        height = frame.height + 1
        if frame.anchor is not None:
            del self.open_anchors[frame.anchor]
            self.anchors[frame.anchor] = (node, height)
        self._attach(node, height)

    def _define(self, anchor: str, mark) -> None:
        """Refuse a reused anchor name, as PyYAML's SafeLoader does."""
        done = self.anchors.get(anchor)
        first = done[0].line if done else self.open_anchors.get(anchor)
        if first is not None:
            raise error_at(f"duplicate anchor '&{anchor}' (first defined at line {first})",
                         self.path, mark)

    def _expects_key(self) -> bool:
        return bool(self.stack) and self.stack[-1].keys is not None \
            and self.stack[-1].key is None

    def _count(self, size: int, event, alias: bool) -> None:
        self.total += size
        if self.total > MAX_NODES:
            message = ("document too large after expanding aliases (billion laughs?)"
                       if alias else f"document too large (more than {MAX_NODES} nodes)")
            raise error_at(message, self.path, event.start_mark)

    def _attach(self, node: Node, height: int) -> None:
        if not self.stack:
            self.root = node
            return
        top = self.stack[-1]
        top.size += node.size
        top.chars += node.chars
        top.height = max(top.height, height)
        if top.keys is None:
            top.items.append(node)
        else:
            top.items[top.key] = node
            top.key = None


_HANDLERS = {
    yaml.StreamStartEvent: lambda builder, event: None,
    yaml.StreamEndEvent: lambda builder, event: None,
    yaml.DocumentStartEvent: _TreeBuilder._document_start,
    yaml.DocumentEndEvent: _TreeBuilder._document_end,
    yaml.ScalarEvent: _TreeBuilder._scalar,
    yaml.AliasEvent: _TreeBuilder._alias,
    yaml.MappingStartEvent: _TreeBuilder._open,
    yaml.SequenceStartEvent: _TreeBuilder._open,
    yaml.MappingEndEvent: _TreeBuilder._close,
    yaml.SequenceEndEvent: _TreeBuilder._close,
}
