"""Which files `gradflow check PATH...` checks.

A file named on the command line is always checked (it must be a model). In a
directory, every ``*.yaml``/``*.yml`` is read (a regular file, at most 16 MiB looked
at) and is a model when the root mapping of its first YAML document has a
``gradflow`` key: decided from the parser's events, as the loader decides, so a BOM,
flow style, a quoted or explicit key do not hide a model and a ``gradflow:`` line
inside a block scalar or a later document does not make one. Nothing is built
from the events, so no object is ever constructed. A candidate that cannot be read,
and a directory that cannot be listed, is an error for that path; a symlink that
leads back into a directory being walked is not followed (one warning).
"""

from __future__ import annotations

import codecs
import os
import re
import stat

import yaml

from gradflow.errors import InputWarning, ModelError
from gradflow.importers import is_python_target
from gradflow.model.files import open_regular, read_at_most
from gradflow.model.source import LOADER, MAX_CHARS, MAX_NODES

SUFFIXES = (".yaml", ".yml")
# Only for a file the YAML parser gives up on, or one too large to be a valid model: then a
# top-level gradflow: line makes it a model, so the loader says what is wrong with it
# instead of it vanishing from the run.
FALLBACK_MARK = r"""^["']?gradflow["']?[ \t]*:"""   # compiled on first use: rarely needed
# A model has at most MAX_NODES values, each with at most one key: past this many events
# undecided, the file is no model the loader would accept (and the parse would take seconds).
MAX_EVENTS = 2 * MAX_NODES + 16


def model_files(paths) -> tuple[list, list]:
    """(items, warnings): each item a path to check, or a ModelError for a path that cannot
    be; warnings are InputWarnings for stderr. Order: as given, directories in sorted order."""
    items, warnings = [], []
    for raw in paths:
        path = str(raw)
        try:
            is_dir = stat.S_ISDIR(os.stat(path).st_mode)
        except OSError as e:   # FILE.py:FUNC names a function to import, not a file
            items.append(path if is_python_target(path) else
                         ModelError(f"cannot read model: {e.strerror or e}", path, 1, 1))
            continue
        if is_dir:
            walk(path, items, warnings)
        else:
            items.append(path)
    return once(items), warnings


def once(items: list) -> list:
    """Each file once, where it was first found (``check models/ models/gan.yaml``, or two
    links to one file)."""
    seen, out = set(), []
    for item in items:
        try:
            info = os.stat(item) if isinstance(item, str) else None
        except OSError:
            info = None
        identity = (info.st_dev, info.st_ino) if info else None
        if identity is None or identity not in seen:
            out.append(item)
            seen.add(identity)
    return out


def walk(top: str, items: list, warnings: list) -> None:
    """Without recursion, each real directory entered once; what is found is listed in path
    order, component by component (``a/z.yaml`` before ``a.yaml`` before ``b.yaml``)."""
    found, seen = [], set()
    stack = [(top, ())]   # (directory, identities of the directories above it)
    while stack:
        directory, above = stack.pop()
        try:
            info = os.stat(directory)
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as e:
            error = ModelError(f"cannot read directory: {e.strerror or e}", directory, 1, 1)
            found.append((directory, error))
            continue
        identity = (info.st_dev, info.st_ino)
        if identity in above:
            warnings.append(InputWarning(directory, "symbolic link loop, not followed"))
            continue
        if identity in seen:   # a second link to a directory already checked
            continue
        seen.add(identity)
        subdirectories = []
        for entry in entries:
            path = os.path.join(directory, entry.name)
            if is_directory(entry):
                subdirectories.append((path, above + (identity,)))
            elif entry.name.endswith(SUFFIXES):
                found.append((path, candidate(path)))
        stack.extend(reversed(subdirectories))
    found.sort(key=lambda pair: pair[0].split(os.sep))
    items.extend(item for _, item in found if item is not None)


def is_directory(entry) -> bool:
    try:
        return entry.is_dir()
    except OSError:   # a link loop or a vanished target: not a directory to walk
        return False


def candidate(path: str):
    """``path`` when it is a model, None when it is other YAML, a ModelError when unreadable."""
    try:
        with open_regular(path, "file") as f:
            head = read_at_most(f, MAX_CHARS + 1)
    except ModelError as e:
        return e
    except OSError as e:
        return ModelError(f"cannot read file: {e.strerror or e}", path, 1, 1)
    return path if declares_model(head) else None


def declares_model(data: bytes) -> bool:
    """Whether the root mapping of the first YAML document has a ``gradflow`` key."""
    text = data.removeprefix(codecs.BOM_UTF8).decode("utf-8", errors="replace")
    try:
        found = root_has_key(yaml.parse(text, Loader=LOADER), "gradflow")
    except yaml.YAMLError:
        found = None
    return bool(re.search(FALLBACK_MARK, text, re.MULTILINE)) if found is None else found


def root_has_key(events, key: str) -> bool | None:
    """Reads events only until the answer is known (the first key often settles it);
    None when MAX_EVENTS did not settle it."""
    depth, position = 0, 0   # collections open; scalars and collections seen in the root mapping
    for count, event in enumerate(events):
        if count > MAX_EVENTS:
            return None
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if depth == 0 and not isinstance(event, yaml.MappingStartEvent):
                return False
            position += depth == 1
            depth += 1
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
            if depth == 0:
                return False
        elif isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
            if depth == 0:
                return False
            if depth == 1:
                if position % 2 == 0 and isinstance(event, yaml.ScalarEvent) and event.value == key:
                    return True
                position += 1
        elif isinstance(event, yaml.DocumentEndEvent):
            return False
    return False

