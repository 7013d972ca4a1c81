"""One YAML scalar -> its Python value, converted as PyYAML's SafeLoader would.

Only null, bool, int and float are converted (and YAML 1.2's exponent floats); any
other scalar stays text. A tag the format does not allow, an over-long number or a
value its tag does not fit is a ModelError at the scalar's place.
"""

from __future__ import annotations

import re

import yaml
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from gradflow.model.yamltext import error_at

# Python's own int-from-text limit; it also keeps base-60 ints ("1:2:3...") cheap.
MAX_NUMBER_CHARS = 4300

_STD = "tag:yaml.org,2002:"
_NULL, _BOOL, _INT, _FLOAT, _STR = (_STD + t for t in ("null", "bool", "int", "float", "str"))
SCALAR_TAGS = frozenset({_STR, _NULL, _BOOL, _INT, _FLOAT})
MAP_TAGS = frozenset({_STD + "map"})
SEQ_TAGS = frozenset({_STD + "seq"})
ALLOWED_TAGS = SCALAR_TAGS | MAP_TAGS | SEQ_TAGS
_NULL_WORDS = frozenset({"", "~", "null", "Null", "NULL"})

# Floats with an exponent but no dot, or an unsigned exponent (1e-3, 2.5e3): numbers to YAML
# 1.2, JSON and Python, text to YAML 1.1's resolver, whose float needs both. Read as floats.
_EXPONENT = r"[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+"

_RESOLVER = Resolver()
_IMPLICIT_FIRST = frozenset(_RESOLVER.yaml_implicit_resolvers)
_DECIMAL = re.compile(r"[-+]?(?:0|[1-9][0-9]{0,30})")
_CONSTRUCTOR = SafeConstructor()
_CONVERTERS = {tag: getattr(_CONSTRUCTOR, "construct_yaml_" + tag[len(_STD):])
               for tag in (_NULL, _BOOL, _INT, _FLOAT)}


def short_tag(tag: str) -> str:
    return "!!" + tag[len(_STD):] if tag.startswith(_STD) else tag


def check_tag(event, allowed: frozenset, kind: str, path: str) -> None:
    tag = event.tag
    if tag is None or tag == "!" or tag in allowed:
        return
    problem = f"cannot be used on a {kind}" if tag in ALLOWED_TAGS else "is not allowed"
    raise error_at(f"tag '{short_tag(tag)}' {problem}", path, event.start_mark)


def scalar_value(event, path: str) -> object:
    """Convert like SafeLoader for null/bool/int/float; all else stays text."""
    text, tag = event.value, event.tag
    if tag is None or tag == "!":
        # Quoted text, or a first character no implicit type starts with: a string.
        if not event.implicit[0] or (text and text[0] not in _IMPLICIT_FIRST):
            return text
        if _DECIMAL.fullmatch(text):  # the common case, several times faster than below
            return int(text)
        tag = _RESOLVER.resolve(yaml.ScalarNode, text, event.implicit)
        if tag == _STR and ("e" in text or "E" in text) and re.fullmatch(_EXPONENT, text):
            tag = _FLOAT
    convert = _CONVERTERS.get(tag)
    if convert is None:
        return text  # str, and implicit timestamps etc., which gradflow keeps as text
    if tag in (_INT, _FLOAT) and len(text) > MAX_NUMBER_CHARS:
        raise error_at(f"number too long ({len(text)} characters)", path, event.start_mark)
    # The null constructor accepts any text; an explicit !!null must still look like one.
    if tag == _NULL and text not in _NULL_WORDS:
        raise error_at(f"'{_clip(text)}' is not a valid !!null", path, event.start_mark)
    try:
        return convert(yaml.ScalarNode(tag, text))
    except (ValueError, KeyError, IndexError):
        raise error_at(f"'{_clip(text)}' is not a valid {short_tag(tag)}", path,
                     event.start_mark) from None


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
