"""Modules: calls that expand a reusable sub-graph into a named instance.

Calling a module by its own name uses the instance of that name (so two calls
share weights); ``instances:`` makes separate copies; ``repeat`` unrolls a
one-input, one-output module into ``NAME.0`` ... ``NAME.k``. Parameters of an
instance are named ``INSTANCE.LOCAL``. A module that calls itself, directly or
not, is refused before anything is built.
"""

from __future__ import annotations

import ast

from gradflow.errors import ModelError
from gradflow.model.evaluate import Scope, later_names
from gradflow.model.expr import dotted_name


def check_module_cycles(spec) -> None:
    """Refuse module recursion, naming the chain and the call that closes it."""
    def callees(module):
        for entry in module.graph:
            for node in ast.walk(entry.tree) if entry.tree is not None else ():
                if isinstance(node, ast.Call):
                    name = dotted_name(node.func)
                    if name == "repeat" and node.args:
                        name = dotted_name(node.args[0])
                    target = spec.instances[name].module if name in spec.instances else name
                    if target in spec.modules:
                        yield target, node

    state = {}   # module -> "open" while on the stack, "done" after
    for root in spec.modules:
        stack = [(root, iter(callees(spec.modules[root])), [root])]
        state[root] = state.get(root) or "open"
        while stack:
            name, calls, chain = stack[-1]
            step = next(calls, None)
            if step is None:
                state[name] = "done"
                stack.pop()
                continue
            callee, node = step
            if state.get(callee) == "open":
                cycle = " -> ".join(chain[chain.index(callee):] + [callee])
                raise ModelError(f"module recursion: {cycle}", spec.path, node.lineno, node.col_offset)
            if state.get(callee) is None:
                state[callee] = "open"
                stack.append((callee, iter(callees(spec.modules[callee])), chain + [callee]))


class ModuleCalls:
    """The module half of the Builder: instances, calls, repeat."""

    def is_callable_module(self, scope, name) -> bool:
        return name in self.spec.instances or name in self.spec.modules

    def callable_names(self, scope) -> list:
        return list(self.spec.modules) + list(self.spec.instances) + ["repeat"]

    def call_module(self, ev, name: str, node: ast.Call, path: str | None = None):
        if name in self.spec.instances:
            inst = self.spec.instances[name]
            module, overrides, path = self.spec.modules[inst.module], inst.dims, path or name
        else:
            module, overrides, path = self.spec.modules[name], {}, path or ev.scope.prefix + name
        if node.keywords or len(node.args) != len(module.inputs):
            raise ModelError(f"module {module.name!r} takes {len(module.inputs)} input(s) "
                             f"({', '.join(module.inputs)}), got {len(node.args) + len(node.keywords)}",
                             self.path, node.lineno, node.col_offset)
        args = [ev.tensor(a) for a in node.args]
        return self.expand(module, path, overrides, args, ev.scope, node)

    def expand(self, module, path: str, overrides: dict, args: list, outer: Scope, node):
        dims = {**self.model.dims, **{k: v for k, (v, _) in module.dims.items()},
                **{k: v for k, (v, _) in overrides.items()}}
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
            raise fail(f"repeat(): {block or 'the first argument'!r} is not a module", args["block"])
        module = self.spec.modules[block]
        if len(module.inputs) != 1 or module.multi:
            raise fail(f"repeat(): module {block!r} must take one input and give one output")
        times = ev.static(args["times"], "times")
        if not isinstance(times, int) or isinstance(times, bool) or times < 1:
            raise fail(f"repeat(): times must be a positive integer, got {times!r}", args["times"])
        name = ev.static(args["name"], "name") if "name" in args else block
        if not isinstance(name, str) or not name.replace(".", "_").isidentifier():
            raise fail("repeat(): name must be a string naming the instances, e.g. name=\"enc\"")
        h = ev.tensor(args["x"])
        for i in range(times):
            h = self.expand(module, f"{ev.scope.prefix}{name}.{i}", {}, [h], ev.scope, node)
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


def references(tree) -> set:
    """The (dotted) names an expression tree mentions."""
    if tree is None:
        return set()
    return {dotted_name(n) for n in ast.walk(tree) if isinstance(n, (ast.Name, ast.Attribute))} - {None}
