"""Modules: calls that expand a reusable sub-graph into a named instance.

Calling a module by its own name uses the instance of that name (so two calls
share weights); ``instances:`` makes separate copies; ``repeat`` unrolls a
one-input, one-output module into ``NAME.0`` ... ``NAME.k``. Parameters of an
instance are named ``INSTANCE.LOCAL``. A module that calls itself, directly or
not, is refused before anything is built.
"""

from __future__ import annotations

import ast

from gradflow.errors import ModelError, did_you_mean
from gradflow.model.dims import resolve as resolve_dims
from gradflow.model.evaluate import Scope, later_names
from gradflow.model.expr import dotted_name, nodes_of
from gradflow.model.replay import Template
from gradflow.model.spec import Place


def callees(spec, graph):
    """(module name, call node, how many expansions) for each module call in a graph."""
    for entry in graph:
        for node in nodes_of(entry.tree) if entry.tree is not None else ():
            if not isinstance(node, ast.Call):
                continue
            name, repeated = dotted_name(node.func), False
            if name == "repeat" and node.args:
                name, repeated = dotted_name(node.args[0]), True
            target = spec.instances[name].module if name in spec.instances else name
            if target in spec.modules:
                yield target, node, repeated


def check_module_cycles(spec) -> list:
    """Refuse module recursion, naming the chain and the call that closes it.
    Returns the modules callees first (an order to size them in)."""
    state, order = {}, []   # module -> "open" while on the stack, "done" after
    for root in spec.modules:
        if state.get(root):
            continue
        state[root] = "open"
        stack = [(root, callees(spec, spec.modules[root].graph), [root])]
        while stack:
            name, calls, chain = stack[-1]
            step = next(calls, None)
            if step is None:
                state[name] = "done"
                order.append(name)
                stack.pop()
                continue
            callee, node, _ = step
            if state.get(callee) == "open":
                cycle = " -> ".join(chain[chain.index(callee):] + [callee])
                raise ModelError(f"module recursion: {cycle}", spec.path, node.lineno, node.col_offset)
            if state.get(callee) is None:
                state[callee] = "open"
                stack.append((callee, callees(spec, spec.modules[callee].graph), chain + [callee]))
    return order


def check_expansion(spec, dims: dict, limit: int) -> None:
    """Refuse, before anything is built, modules that expand past ``limit`` nodes: a
    module calling another twice, thirty levels deep, is 2**30 nodes; so is repeat
    with times=10**9. Sizes are counted in the tape nodes an expression records (its op
    calls, operators and subscripts; names and numbers record none), callees first."""
    sizes: dict[str, int] = {}
    for name in check_module_cycles(spec):
        module = spec.modules[name]
        scope = resolve_dims(module.dims, dims, spec.path, f"dims of module {name!r}")
        sizes[name] = graph_size(spec, module.graph, scope, sizes, limit)
    if spec.modules:   # without modules (nor instances of them) nothing expands: no walk to make
        graph_size(spec, spec.graph, dims, sizes, limit)


def graph_size(spec, graph, dims: dict, sizes: dict, limit: int) -> int:
    total = 0
    for entry in graph:
        total += recorded(entry.tree) if entry.tree is not None else 1
        for callee, node, repeated in callees(spec, [entry]):
            times = static_int(node.keywords, node.args, dims) if repeated else 1
            total += times * sizes[callee]
            if total > limit:
                raise ModelError(f"expanding modules here makes the graph larger than {limit:,} nodes "
                                 f"(about {total:.3g}); check repeat counts and nested module calls",
                                 spec.path, node.lineno, node.col_offset)
    return total


RECORDING = (ast.Call, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Subscript)


def recorded(tree) -> int:
    """How many tape nodes an expression records at most (a module call's own nodes are
    counted separately, as its callee's size)."""
    return max(1, sum(isinstance(node, RECORDING) for node in nodes_of(tree)))


def static_int(keywords, args, dims: dict) -> int:
    """repeat's `times` when it is a number, a dim or arithmetic of those; else 1."""
    node = next((k.value for k in keywords if k.arg == "times"), args[2] if len(args) > 2 else None)
    try:
        return max(int(fold(node, dims)), 1)
    except (TypeError, ValueError, OverflowError, ZeroDivisionError, RecursionError):
        return 1


def fold(node, dims):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.Name) and node.id in dims:
        return dims[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = fold(node.operand, dims)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult, ast.Pow, ast.Sub,
                                                            ast.FloorDiv, ast.Div)):
        a, b = fold(node.left, dims), fold(node.right, dims)
        if isinstance(node.op, ast.Pow):
            return a ** b if abs(b) <= 64 and abs(a) < 2 ** 64 else 2 ** 64
        if isinstance(node.op, (ast.FloorDiv, ast.Div)):
            return a // b if isinstance(node.op, ast.FloorDiv) else a / b
        return a + b if isinstance(node.op, ast.Add) else (a * b if isinstance(node.op, ast.Mult) else a - b)
    raise ValueError("not static")


class ModuleCalls:
    """The module half of the Builder: instances, calls, repeat."""

    def callable_names(self) -> list:
        return list(self.spec.modules) + list(self.spec.instances) + ["repeat"]

    def call_module(self, ev, name: str, node: ast.Call, path: str | None = None):
        if name in self.spec.instances:
            inst = self.spec.instances[name]
            module, overrides, path = self.spec.modules[inst.module], inst.dims, path or name
        else:
            module, overrides, path = self.spec.modules[name], {}, path or ev.scope.prefix + name
        given = dict(zip(module.inputs, node.args))   # by position, then by the inputs' names
        for kw in node.keywords:
            if kw.arg not in module.inputs or kw.arg in given:   # (** is refused with the expression)
                problem = "is given twice" if kw.arg in given else \
                    f"is not one of its inputs ({', '.join(module.inputs)})"
                raise ModelError(f"module {module.name!r}: input {kw.arg!r} {problem}", self.path, kw.lineno,
                                 kw.col_offset)
            given[kw.arg] = kw.value
        if len(node.args) > len(module.inputs) or len(given) != len(module.inputs):
            missing = [n for n in module.inputs if n not in given]
            raise ModelError(f"module {module.name!r} takes {len(module.inputs)} input(s) "
                             f"({', '.join(module.inputs)}), got {len(node.args) + len(node.keywords)}"
                             + (f": {', '.join(missing)} missing" if missing and node.keywords else ""),
                             self.path, node.lineno, node.col_offset)
        args = [ev.tensor(given[n]) for n in module.inputs]
        return self.expand(module, path, overrides, args, node)

    def expand(self, module, path: str, overrides: dict, args: list, node):
        dims = resolve_dims({**module.dims, **overrides}, self.model.dims, self.path,
                            f"dims of {'instance ' + repr(path) if overrides else 'module ' + repr(module.name)}")
        params = self.instantiate(module, path, dims, node)
        tensors = {**dict(zip(module.inputs, args)), **params}
        scope = Scope(path + ".", tensors, dims, later_names(module.graph), f"module {module.name!r}")
        self.run_graph(module.graph, scope)
        outputs = tuple(tensors[name] for name in module.outputs)
        return outputs if module.multi else outputs[0]

    def instantiate(self, module, path: str, dims: dict, node) -> dict:
        """The parameters of instance ``path``, created on its first call."""
        if path in self.instances:
            return self.instances[path]
        if not module.params:   # nothing to share between calls: no record kept per instance
            return {}
        if not (isinstance(node.func, ast.Name) and node.func.id == "repeat"):   # its instances share a call
            declared = self.spec.instances.get(path)
            self.called[path] = (module.name, declared.place if declared else Place(node.lineno, node.col_offset))
        params = {}
        for local, t in module.params.items():
            full = f"{path}.{local}"
            if full in self.model.params or full in self.model.inputs:
                raise ModelError(f"instance {path!r} creates {full!r}, which is already defined",
                                 self.path, node.lineno, node.col_offset)
            params[local] = self.model.params[full] = self.leaf(full, t, dims, is_param=True)
        self.instances[path] = params
        return params

    def call_repeat(self, ev, node: ast.Call):
        def fail(message, at=node):
            return ModelError(message, self.path, at.lineno, at.col_offset)
        args = dict(zip(("block", "x", "times", "name"), node.args))
        for kw in node.keywords:
            if kw.arg not in ("block", "x", "times", "name") or kw.arg in args:
                raise fail(f"repeat() takes (block, x, times, name=...): bad argument {kw.arg!r}", kw)
            args[kw.arg] = kw.value
        if not {"block", "x", "times"} <= set(args) or len(node.args) > 4:
            raise fail("repeat() takes (block, x, times=N, name=...)")
        block = dotted_name(args["block"])
        if block not in self.spec.modules:
            hint = did_you_mean(block, self.spec.modules) if block else ""
            raise fail(f"repeat(): {block or 'the first argument'!r} is not a module{hint}", args["block"])
        module = self.spec.modules[block]
        if len(module.inputs) != 1 or module.multi:
            raise fail(f"repeat(): module {block!r} must take one input and give one output")
        times = ev.static(args["times"], "times")
        if not isinstance(times, int) or isinstance(times, bool) or times < 1:
            raise fail(f"repeat(): times must be a positive integer, got {times!r}", args["times"])
        name = ev.static(args["name"], "name") if "name" in args else block
        if not isinstance(name, str) or not name.replace(".", "_").isidentifier():
            raise fail("repeat(): name must be a string naming the instances, e.g. name=\"enc\"")
        prefix = f"{ev.scope.prefix}{name}"
        first, named = self.repeats.setdefault(prefix, (node, "name" in args))
        if first is not node and not (named and "name" in args):   # sharing is said twice, or it is a slip
            own = ev.scope.current.targets[0] if ev.scope.current is not None else f"{name}2"
            raise fail(f"repeat(): the instances {prefix}.0, ... of the repeat on line {first.lineno} would be used "
                       f"again here, sharing their weights: give this one its own name=\"{own}\", or write "
                       f"name=\"{name}\" in both to share them")
        return self.repeat_block(module, ev.tensor(args["x"]), f"{prefix}.", times, node)

    def repeat_block(self, module, h, prefix: str, times: int, node):
        """Instances ``PREFIX0`` ... in sequence; later ones replayed from a template when they fit."""
        template, nodes, limit = None, self.tape.nodes, self.max_nodes()
        for i in range(times):
            path = f"{prefix}{i}"
            if template is not None and template.fits(h) and len(nodes) + template.size <= limit:
                h = template.replay(path, h, self.instantiate(module, path, template.dims, node))
                continue
            start, x = len(nodes), h
            try:
                h = self.expand(module, path, {}, [h], node)
            except ModelError as e:
                if i == 0 or first_in == x.shape:
                    raise
                # The block changed the shape it is fed: its own output does not fit it again.
                raise ModelError(f"repeat: {module.name} maps {list(first_in)} to {list(first_out)}, so "
                                 f"{path} cannot take its output: {e.message}", self.path,
                                 node.lineno, node.col_offset) from None
            if i == 0:
                first_in, first_out = x.shape, h.shape
            if template is None and replayable(self.spec, module, nodes, start):
                dims = resolve_dims(module.dims, self.model.dims, self.path, f"dims of module {module.name!r}")
                template = Template(self.tape, start, path, x, self.instances.get(path, {}), h, dims)
        return h

    def forward_reference(self, scope, name: str) -> str:
        """Why a name defined further down cannot be used here: a cycle, or just order."""
        current = scope.current
        came_from, stack = {name: None}, [name]
        while stack:
            n = stack.pop()
            if n in current.targets:
                chain = []
                while n is not None:
                    chain.append(n)
                    n = came_from[n]
                return "cycle between graph entries: " + " -> ".join([current.targets[0]] + chain[::-1])
            for ref in references(scope.later[n].tree):
                if ref in scope.later and ref not in came_from:
                    came_from[ref] = n
                    stack.append(ref)
        line = scope.later[name].place.line
        return f"{name!r} is used before it is defined (line {line}); graph entries are evaluated in order"


def replayable(spec, module, nodes: list, start: int) -> bool:
    """Whether an instance recorded from ``start`` may serve as a template: its block calls
    no module (nested instances keep state) and no seeded op (each call has its own seed)."""
    if next(callees(spec, module.graph), None) is not None:
        return False
    return not any(n.op is not None and n.op.seeded for n in nodes[start:])


def references(tree) -> set:
    """The (dotted) names an expression tree mentions."""
    if tree is None:
        return set()
    return {dotted_name(n) for n in nodes_of(tree) if isinstance(n, (ast.Name, ast.Attribute))} - {None}
