"""`gradflow ops`: the op table, built from the engine's OPS, printed verbatim.

One op per entry: its call signature and what passes backward on the first line,
its description indented below (wrapped between words on a terminal, never in a
pipe). Text is printed as it is: brackets in a signature are not markup.
"""

from __future__ import annotations

import textwrap

from rich.text import Text

from gradflow.engine import ALIASES, OPS

# Calls with several outputs, and module calls: not ops (an op has one output), documented with them.
MODULE_CALLS = [
    ("MODULE(x, ...)", "through its graph", "call a module of the model file on its inputs: the instance of that "
     "name (every call shares its weights; `instances:` makes separate copies)"),
    ("split(x, size, axis=0)", "all",
     "x cut along axis into pieces of size (the last may be smaller), as torch.split; "
     "unpacked by a graph key `a, b: split(x, 4, axis=1)`, or one taken: `split(x, 4)[0]`"),
    ("chunk(x, n, axis=0)", "all",
     "x cut along axis into n pieces of ceil(size / n) (fewer when they run out), as torch.chunk; "
     "unpacked by `a, b: chunk(x, 2, axis=-1)`, or one taken: `chunk(x, 2)[0]`"),
    ("repeat(module, x, times=N, name=None)", "through its graph",
     "apply a one-input, one-output module N times in sequence, each time with its own weights: "
     "instances module.0 ... module.N-1 (or NAME.0 ... with name=\"NAME\"); times may be a dim"),
]


def gradient(op) -> str:
    """What passes backward: 'all', 'none: stop', 'none: cut' or 'not through idx'."""
    if op.kind == "stop":
        return "none: stop"
    if op.kind == "implicit":
        return "none: cut"
    cut = [name for k, name in enumerate(op.inputs) if not op.has_rule(k)]
    return "all" if not cut else "not through " + ", ".join(cut)


def entries() -> dict:
    """group -> [(signature, gradient, description)], in the table's order."""
    aliases: dict[str, list] = {}
    for alias, target in ALIASES.items():
        aliases.setdefault(target, []).append(alias)
    groups: dict[str, list] = {}
    for op in OPS.values():
        doc = op.doc
        for alias in aliases.get(op.name, ()):
            if f"alias: {alias}" not in doc:
                doc += f" (alias: {alias})"
        groups.setdefault(op.group, []).append((op.name + op.signature, gradient(op), doc))
    groups["several outputs and modules"] = MODULE_CALLS
    return groups


def render(out) -> None:
    width = out.width if out.is_terminal else None   # a pipe gets whole lines
    for k, (group, ops) in enumerate(entries().items()):
        if k:
            out.print()
        out.print(Text(group, style="bold"))
        for signature, passes, doc in ops:
            head = Text("  " + signature)
            head.append(f"  gradient: {passes}", style="dim")
            out.print(head, soft_wrap=True)
            lines = textwrap.wrap(doc, max(width - 6, 30), break_long_words=False) if width else [doc]
            for line in lines:
                out.print(Text("      " + line), soft_wrap=True)
