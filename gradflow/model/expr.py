"""Graph expressions: Python syntax, parsed with ``ast`` and checked against an allowlist.

Nothing is ever evaluated by Python. ``parse_expression`` returns a checked
``ast`` tree whose nodes carry *file* positions (``lineno`` is the file line,
``col_offset`` the 1-based file column), so every later error has a place.
"""

from __future__ import annotations

import ast
import re
import warnings

from gradflow.errors import ModelError, did_you_mean
from gradflow.model.places import TextPlaces
from gradflow.model.simple import parse_simple, parse_simple_init
from gradflow.model.spec import Init, Place

MAX_CHARS = 10_000
MAX_DEPTH = 100

BINARY = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow",
          ast.MatMult: "matmul"}
COMPARE = {ast.Lt: "less", ast.LtE: "less_equal", ast.Gt: "greater", ast.GtE: "greater_equal",
           ast.Eq: "equal", ast.NotEq: "not_equal"}
UNARY = (ast.USub, ast.UAdd)
PLAIN = frozenset({ast.List, ast.Tuple, ast.Subscript, ast.Slice, ast.keyword})   # allowed as they are
# Friendly names for what people try and we refuse.
REFUSED = {ast.Lambda: "lambda", ast.IfExp: "a conditional expression", ast.BoolOp: "'and'/'or'",
           ast.ListComp: "a comprehension", ast.GeneratorExp: "a comprehension",
           ast.SetComp: "a comprehension", ast.DictComp: "a comprehension", ast.Dict: "a dict",
           ast.Set: "a set", ast.Starred: "'*' unpacking", ast.JoinedStr: "an f-string",
           ast.NamedExpr: "':='", ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield"}
# A dotted name one of whose segments is an integer (`G.0.weight`, as PyTorch's state_dict
# spells it), outside string literals (matched first, and left alone).
INTEGER_SEGMENT_NAME = re.compile(r"""("[^"]*"|'[^']*')|\b[A-Za-z_]\w*(?:\.(?:[A-Za-z_]\w*|\d+(?!\w)))*\.\d+(?!\w)"""
                                  r"(?:\.(?:[A-Za-z_]\w*|\d+(?!\w)))*")
DOT_DIGIT = r"\.\d"   # in every match of the one above outside a string literal (compiled on first use)
INIT_ARITY = {"normal": (0, 2), "uniform": (2,), "glorot": (0,), "he": (0,), "zeros": (0,),
              "ones": (0,), "constant": (1,), "randint": (2,)}


def parse_expression(text: str, path: str, origin: Place, quoted: bool = False,
                     raw: str | None = None) -> ast.expr:
    """Parse and check one graph expression; its nodes get file positions.

    ``raw`` is the scalar's source text when the value is not a verbatim copy of it
    (folded over lines, a block scalar, escaped): places are then found in it.
    """
    tree = parse_simple(text, origin, quoted) if raw is None else None
    return tree if tree is not None else parse_general(text, path, origin, quoted, raw)


def parse_general(text: str, path: str, origin: Place, quoted: bool = False,
                  raw: str | None = None) -> ast.expr:
    """``parse_expression`` through Python's parser: any expression, every refusal."""
    places = TextPlaces(text, origin, quoted, raw)
    deep = too_deep(text)
    if deep is not None:   # say so before the parser recurses into it, at the bracket itself
        raise ModelError(f"expression nested deeper than {MAX_DEPTH} levels", path, *places.at(deep))
    if len(text) > MAX_CHARS:
        raise ModelError(f"expression longer than {MAX_CHARS} characters", path, origin.line, origin.col)
    foreign = non_ascii_code(text)
    if foreign is not None:   # Python's parser would read a full-width 'ｗ' as the name w
        ch = text[foreign]
        raise ModelError(f"non-ASCII character {ch!r} (U+{ord(ch):04X}) in an expression: names and "
                         "operators are ASCII", path, *places.at(foreign))
    try:
        with warnings.catch_warnings():
            # The parser warns on stderr about sloppy literals ("1if"): make them located errors.
            warnings.simplefilter("error")
            stripped = text.strip()
            spelled = spell_integer_segments(stripped)
            tree = ast.parse(spelled, mode="eval").body
    except SyntaxError as e:
        raise ModelError(f"invalid expression: {e.msg}", path,
                         *places.at_char(e.lineno or 1, max((e.offset or 1) - 1, 0))) from None
    except (RecursionError, MemoryError, ValueError):
        raise ModelError("expression nested too deeply", path, origin.line, origin.col) from None
    if spelled != stripped:
        restore_integer_segments(tree, stripped)
    tree.gradflow_nodes = flatten(tree, Checker(places, path))   # walked once: the builder reuses the list
    return tree


def non_ascii_code(text: str) -> int | None:
    """Index of the first non-ASCII character outside a quoted string, else None."""
    if text.isascii():    # nearly always: no walk in Python
        return None
    quote, escaped = None, False
    for i, ch in enumerate(text):
        if quote is not None:     # a backslash escapes the next character, a quote among them
            quote = None if ch == quote and not escaped else quote
            escaped = ch == "\\" and not escaped
        elif ch in "'\"":
            quote = ch
        elif not ch.isascii():
            return i
    return None


SKIP = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop)
# Fields that never hold a node to walk into, left out of each type's walk.
LEAF_FIELDS = frozenset({"ctx", "op", "id", "attr", "kind", "arg", "type_comment"})
WALKED_FIELDS: dict = {}   # node type -> the fields that may hold nodes, found on first sight


def flatten(tree: ast.AST, visit=None) -> list:
    """Every node of a tree in one iterative walk, parents before children; ``visit(node,
    depth)`` sees each as it is reached. A chain of operators (a + b + c ...) is long, not
    deep: a BinOp's left operand keeps its depth, as the evaluator walks such a chain in a loop."""
    stack, out = [(tree, 1)], []
    while stack:
        node, depth = stack.pop()
        out.append(node)
        if visit is not None:
            visit(node, depth)
        kind = type(node)
        fields = WALKED_FIELDS.get(kind)
        if fields is None:
            fields = WALKED_FIELDS[kind] = tuple(f for f in kind._fields if f not in LEAF_FIELDS)
        left = node.left if kind is ast.BinOp else None
        for field in fields:
            value = getattr(node, field, None)
            if isinstance(value, ast.AST):
                if not isinstance(value, SKIP):
                    stack.append((value, depth if value is left else depth + 1))
            elif type(value) is list:
                stack.extend((item, depth + 1) for item in value
                             if isinstance(item, ast.AST) and not isinstance(item, SKIP))
    return out


def nodes_of(tree: ast.AST) -> list:
    """Every node of a parsed expression (from the walk its parse made, when it did one)."""
    nodes = getattr(tree, "gradflow_nodes", None)
    return nodes if nodes is not None else flatten(tree)


def spell_integer_segments(text: str) -> str:
    """``G.0.weight`` -> ``G_0.weight``: Python cannot parse a digit after a dot in a name,
    so such a dot becomes ``_`` (one byte for one, so every parser position still holds);
    ``restore_integer_segments`` puts the real name back into the tree."""
    if re.search(DOT_DIGIT, text) is None:   # the usual case: a cheaper scan than the one below
        return text

    def respell(match):
        if match.group(1):
            return match.group(0)
        return re.sub(r"\.(?=\d)", "_", match.group(0))
    return INTEGER_SEGMENT_NAME.sub(respell, text)


def restore_integer_segments(tree: ast.AST, text: str) -> None:
    """Give names and attributes whose spelling was changed their text as written."""
    lines = [line.encode("utf-8") for line in text.split("\n")]

    def written(lineno, start, end) -> str:
        return lines[lineno - 1][start:end].decode("utf-8")
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.end_lineno == node.lineno:
            node.id = written(node.lineno, node.col_offset, node.end_col_offset)
        elif isinstance(node, ast.Attribute) and "_" in node.attr:
            size = len(node.attr.encode("utf-8"))
            node.attr = written(node.end_lineno, node.end_col_offset - size, node.end_col_offset)


def too_deep(text: str) -> int | None:
    """Index of the first bracket that opens level MAX_DEPTH + 1, or None."""
    if sum(text.count(bracket, 0, MAX_CHARS + 1) for bracket in "([{") <= MAX_DEPTH:
        return None   # too few brackets to be too deep (the usual case, counted without a loop)
    depth = 0
    for index, char in enumerate(text[:MAX_CHARS + 1]):
        if char in "([{":
            depth += 1
            if depth > MAX_DEPTH:
                return index
        elif char in ")]}":
            depth -= 1
    return None


class Checker:
    """What the walk of a parsed expression does at each node: turn the parser's position
    inside the string into a file place, then refuse anything outside the allowlist or
    nested past MAX_DEPTH (the first such node in walk order is the error)."""

    def __init__(self, places: TextPlaces, path: str):
        self.places, self.path = places, path
        self.line, self.base = places.same_line()

    def __call__(self, node: ast.AST, depth: int) -> None:
        if hasattr(node, "lineno"):
            if self.base is None:
                node.lineno, node.col_offset = self.places.at_node(node.lineno, node.col_offset)
            else:   # one line of ASCII copied verbatim: a byte offset is a column offset
                node.lineno, node.col_offset = self.line, self.base + node.col_offset
        if depth > MAX_DEPTH:
            raise refuse(node, self.path, f"expression nested deeper than {MAX_DEPTH} levels")
        problem = refusal(node)
        if problem:
            raise refuse(node, self.path, problem)


def refuse(node, path, message) -> ModelError:
    return ModelError(message, path, getattr(node, "lineno", None), getattr(node, "col_offset", None))


def refusal(node: ast.AST) -> str | None:
    """Why this node is not allowed, or None when it is."""
    if type(node) in PLAIN:
        return None
    if type(node) in REFUSED:
        return f"{REFUSED[type(node)]} is not allowed in a graph expression"
    if isinstance(node, ast.Name):
        return f"{node.id!r}: names starting with '__' are not allowed" if node.id.startswith("__") else None
    if isinstance(node, ast.Attribute):
        return None if dotted_name(node) else "attribute access is not allowed (names are dotted identifiers)"
    if isinstance(node, ast.Constant):
        ok = node.value is None or node.value is Ellipsis or isinstance(node.value, (int, float, str))
        return None if ok else f"the constant {node.value!r} is not allowed"
    if isinstance(node, ast.UnaryOp):
        return None if isinstance(node.op, UNARY) else f"the operator '{op_text(node.op)}' is not allowed"
    if isinstance(node, ast.BinOp):
        return None if type(node.op) in BINARY else (
            f"the operator '{op_text(node.op)}' is not allowed (the operators are + - * / ** @ and comparisons)")
    if isinstance(node, ast.Compare):
        if len(node.ops) > 1:
            return "chained comparisons are not allowed: compare two values at a time"
        return None if type(node.ops[0]) in COMPARE else f"the operator '{op_text(node.ops[0])}' is not allowed"
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute) and not dotted_name(node.func):
            return "method calls are not allowed: call ops by name, e.g. sum(x)"
        if type(node.func) in REFUSED:
            return None   # the callee itself is refused next, by its own name (a lambda, ...)
        if not isinstance(node.func, (ast.Name, ast.Attribute)):
            return "only ops and modules can be called"
        if any(k.arg is None for k in node.keywords):
            return "'**' unpacking is not allowed"
        return None
    return f"{type(node).__name__} is not allowed in a graph expression"


def dotted_name(node: ast.AST) -> str | None:
    """'a.b.c' for a chain of attribute accesses on a plain name, else None."""
    if node.__class__ is ast.Name:   # the usual callee and operand: no list to join
        return node.id
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def op_text(op) -> str:
    return {ast.FloorDiv: "//", ast.Mod: "%", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
            ast.LShift: "<<", ast.RShift: ">>", ast.Not: "not", ast.Invert: "~", ast.Is: "is",
            ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}.get(type(op), type(op).__name__)


def parse_init(text: str, path: str, origin: Place, quoted: bool = False, raw: str | None = None) -> Init:
    """``normal``, ``normal(0, 0.02)``, ``randint(0, actions)``...: numbers or dim names as arguments."""
    simple = parse_simple_init(text) if raw is None else None
    if simple is not None and len(simple[1]) in INIT_ARITY.get(simple[0], ()):
        return Init(*simple, place=Place(origin.line, origin.col + int(quoted)))
    return parse_general_init(text, path, origin, quoted, raw)


def parse_general_init(text: str, path: str, origin: Place, quoted: bool = False, raw: str | None = None) -> Init:
    """``parse_init`` through the expression parser: any text, every refusal."""
    tree = parse_expression(text, path, origin, quoted, raw)
    call = tree if isinstance(tree, ast.Call) else None
    name = dotted_name(call.func if call else tree)
    if name not in INIT_ARITY:
        raise refuse(tree, path, f"unknown init {name or text!r}{did_you_mean(name or text, INIT_ARITY)}")
    args = []
    for arg in call.args if call else ():
        if isinstance(arg, ast.Name):
            args.append(arg.id)
        elif isinstance(arg, ast.Constant) and isinstance(arg.value, (int, float)) and not isinstance(arg.value, bool):
            args.append(arg.value)
        elif isinstance(arg, ast.UnaryOp) and isinstance(arg.operand, ast.Constant) and isinstance(arg.operand.value, (int, float)):
            args.append(-arg.operand.value if isinstance(arg.op, ast.USub) else arg.operand.value)
        else:
            raise refuse(arg, path, "init arguments must be numbers or dim names")
    if call and call.keywords:
        raise refuse(call.keywords[0], path, "init takes positional arguments only")
    if len(args) not in INIT_ARITY[name]:
        raise refuse(tree, path, f"{name} takes {' or '.join(map(str, INIT_ARITY[name]))} arguments, got {len(args)}")
    return Init(name, tuple(args), place=Place(tree.lineno, tree.col_offset))
