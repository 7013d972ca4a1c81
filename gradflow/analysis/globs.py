"""Parameter names against the globs of ``expect:`` and ``wrt:``, by fnmatch's rules (case kept).

fnmatch compiles a regular expression for every glob it has not seen, a tenth of a
millisecond each, and a run over many models sees hundreds. Most globs are a plain name
or a prefix and one final ``*`` (``encoder.*``); plain string tests decide those exactly
as fnmatch does, and every other glob still goes to fnmatch.
"""

from __future__ import annotations

import fnmatch

from gradflow.errors import did_you_mean


def glob_matches(name: str, glob: str) -> bool:
    """``fnmatch.fnmatchcase(name, glob)``."""
    head = glob[:-1] if glob.endswith("*") else glob
    if "*" in head or "?" in head or "[" in head:
        return fnmatch.fnmatchcase(name, glob)
    return name.startswith(head) if len(head) < len(glob) else name == glob


def glob_hint(glob: str, names) -> str:
    """' (did you mean 'critic.*'?)' for a glob that matches nothing: the names, and each
    module's glob (``critic.*`` of ``critic.w1``), are the candidates, so a mistyped glob
    is answered with a glob rather than with one of the parameters it meant."""
    candidates = dict.fromkeys(names)
    for name in names:
        at = name.find(".")
        while at > 0:
            candidates[name[:at] + ".*"] = None
            at = name.find(".", at + 1)
    return did_you_mean(glob, candidates)
