"""ModelSpec -> Model: a lazy tape whose every shape is known before any array exists.

``build`` records the whole graph with shapes and dtypes only (modules expanded
into instances, ``repeat`` unrolled). ``Model.materialize`` then fills in the
initial values (or loaded weights) and runs the forward pass. Between the two,
``Model.memory_estimate`` says what the numeric run will need.
"""

from __future__ import annotations

import ast

import numpy as np

from gradflow.engine import Tape, Tensor, gc_paused
from gradflow.errors import ModelError, did_you_mean
from gradflow.model.built import Model
from gradflow.model.dims import resolve as resolve_dims
from gradflow.model.evaluate import Evaluator, NodeInfo, Scope, later_names
from gradflow.model.init import value_problem, default_init, first_used_as_gain, init_problem, sha256
from gradflow.model.modules import ModuleCalls, check_expansion
from gradflow.model.spec import ModelSpec, Place, TensorSpec

MAX_ELEMENTS = 10 ** 14      # per tensor: beyond any real model, and beyond what numpy can index sanely
MAX_NODES = 1_000_000        # per model, after expanding modules and repeat


class Builder(ModuleCalls):
    """Records one ModelSpec onto a lazy tape."""

    def __init__(self, spec: ModelSpec, dims: dict | None = None, seed: int | None = None,
                 dtype=np.float64):
        self.spec = spec
        self.path = spec.path
        self.tape = Tape(dtype, eager=False)
        self.model = Model(spec, self.resolve_dims(dims or {}), spec.seed if seed is None else seed, self.tape)
        self.instances: dict[str, dict] = {}    # instance path -> its params (local name -> Tensor)
        self.repeats: dict[str, tuple] = {}     # instances' prefix -> (the repeat call, its name= given)
        self.called: dict[str, tuple] = {}      # instance path -> (module, Place of its declaration or call)
        self.zeros_by_default: dict[int, str] = {}   # tape index -> param name (a gain gets ones)
        self.calling_entry: str | None = None        # the top-level graph entry being evaluated

    def fail(self, message, place) -> ModelError:
        return ModelError(message, self.path, place.line, place.col)

    def resolve_dims(self, overrides: dict) -> dict:
        """The file's dims after --dim overrides, expressions evaluated last."""
        declared = dict(self.spec.dims)
        dims = declared
        for name, value in overrides.items():
            if name not in dims:
                known = f" (it has {', '.join(dims)})" if dims else " (it declares no dims)"
                raise self.fail(f"--dim {name}={value}: the model has no dim {name!r}"
                                f"{did_you_mean(name, dims) or known}", self.spec.dims_place or Place(1, 1))
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise self.fail(f"--dim {name}={value}: a dim must be a positive integer",
                                self.spec.dims[name][1])
            declared[name] = (value, declared[name][1])
        try:
            return resolve_dims(declared, {}, self.path, "dims")
        except ModelError as e:     # a file's expression that only the flags broke: say which
            if overrides:
                e.message += " (with " + " ".join(f"--dim {n}={v}" for n, v in overrides.items()) + ")"
            raise

    # -- the whole model ---------------------------------------------------------
    def build(self) -> Model:
        spec, model = self.spec, self.model
        check_expansion(spec, model.dims, MAX_NODES)
        for name, t in spec.inputs.items():
            model.inputs[name] = self.leaf(name, t, model.dims, is_param=False)
        for name, t in spec.params.items():
            model.params[name] = self.leaf(name, t, model.dims, is_param=True)
        tensors = {**model.inputs, **model.params}
        scope = Scope("", tensors, model.dims, later_names(spec.graph), "the graph")
        self.run_graph(spec.graph, scope)
        self.point_at_instances()
        for name in first_used_as_gain(self.tape.nodes, self.zeros_by_default):
            model.inits[name] = ("ones", ())
        model.entries = {n: tensors[n] for e in spec.graph for n in e.targets}
        for name, loss in spec.losses.items():
            model.losses[name] = self.loss_tensor(name, loss.place, tensors)
        self.tape.keep_values = {t.index for t in model.entries.values()}   # what a name shows, it holds
        return model

    def point_at_instances(self) -> None:
        """A module with several instances declares each parameter on one line for all of
        them: findings about an instance's parameter point at that instance (its line under
        instances:, or the call that made it) instead, unless the file gives them sources."""
        modules: dict[str, list] = {}
        for path, (module, place) in self.called.items():
            modules.setdefault(module, []).append((path, place))
        for module, instances in modules.items():
            if len(instances) < 2 or self.spec.source is not None:
                continue
            for path, place in instances:
                for local, t in self.spec.modules[module].params.items():
                    if t.source is None:
                        self.model.sources[f"{path}.{local}"] = Place(place.line, place.col)

    def loss_tensor(self, name: str, place: Place, tensors: dict) -> Tensor:
        entries = {n for e in self.spec.graph for n in e.targets}
        if name not in entries:
            raise self.fail(f"loss {name!r} is not a graph entry{did_you_mean(name, entries)}", place)
        t = tensors[name]
        if t.shape != ():
            entry = next(e for e in self.spec.graph if name in e.targets)
            raise self.fail(f"loss {name!r} has shape {list(t.shape)}, but a loss must be a scalar: "
                            f"reduce it, e.g. {mean_hint(name, entry, self.spec.step)}", entry.origin)
        if t.dtype.kind != "f":
            raise self.fail(f"loss {name!r} is an integer tensor; it cannot carry a gradient", place)
        return t

    def run_graph(self, graph: list, scope: Scope) -> None:
        evaluator = Evaluator(self, scope, "")   # one for the graph, told each entry in turn
        for entry in graph:
            scope.current = entry
            qualified = scope.prefix + entry.key
            if not scope.prefix:   # module graphs run inside it: their nodes belong to this call
                self.calling_entry = entry.key
            if entry.tree is None:
                value = self.tape.constant(entry.number)
                place = entry.source or Place(entry.origin.line, entry.origin.col, self.path)
                value.meta = NodeInfo(qualified, "constant", place.line, place.col, self.calling_entry,
                                      place.file)
            else:
                evaluator.entry = qualified
                value = evaluator.eval(entry.tree)
            self.bind_targets(entry, value, scope)
            for target in entry.targets:
                scope.later.pop(target, None)

    def bind_targets(self, entry, value, scope: Scope) -> None:
        if isinstance(value, tuple) and all(isinstance(v, Tensor) for v in value):
            if len(value) != len(entry.targets):
                raise self.fail(f"{entry.key!r}: the value has {len(value)} outputs but "
                                f"{len(entry.targets)} name(s) receive them", entry.place)
            scope.tensors.update(zip(entry.targets, value))
            return
        if len(entry.targets) > 1:
            raise self.fail(f"{entry.key!r}: one value cannot be unpacked into "
                            f"{len(entry.targets)} names", entry.place)
        if not isinstance(value, Tensor):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise self.fail(f"graph entry {entry.key!r} is not a tensor", entry.origin)
            value = self.tape.constant(value)
        scope.tensors[entry.targets[0]] = value

    # -- leaves --------------------------------------------------------------------
    def leaf(self, name: str, t: TensorSpec, dims: dict, is_param: bool) -> Tensor:
        if is_param and t.dtype == "int":
            raise self.fail(f"param {name!r} cannot be an integer tensor", t.place)
        shape = self.concrete_shape(t.shape, dims, name, t.shape_place or t.place)
        is_int = t.dtype == "int"
        init = t.init
        if init is None:
            self.model.inits[name] = default_init(shape, is_param, is_int)
        elif init.kind == "value":
            if np.shape(init.value) != shape and int(np.prod(shape)) != np.size(init.value):
                raise self.fail(f"value of {name!r} has shape {list(np.shape(init.value))}, "
                                f"but the shape is {list(shape)}", init.place)
            problem = value_problem(init.value, is_int)
            if problem:
                raise self.fail(f"value of {name!r}: {problem}", init.place)
            self.model.inits[name] = ("value", init.value)
        else:
            if init.kind == "randint" and not is_int:
                raise self.fail(f"randint initialises integer inputs; give {name!r} dtype: int", init.place)
            args = tuple(self.dim_value(a, dims, init.place) for a in init.args)
            problem = init_problem(init.kind, args, shape)
            if problem:
                raise self.fail(f"init of {name!r}: {problem}", init.place)
            self.model.inits[name] = (init.kind, args)
        dtype = np.int64 if is_int else self.tape.dtype
        tensor = self.tape.leaf(shape=shape, dtype=dtype, requires_grad=is_param,
                                meta=NodeInfo(name, "param" if is_param else "input", t.place.line, t.place.col,
                                              file=self.path))
        self.model.places[name] = t.place
        self.model.sources[name] = t.source or self.spec.source or t.place
        if t.frozen:
            self.model.frozen.add(name)
        if init is None and self.model.inits[name] == ("zeros", ()) and is_param:
            self.zeros_by_default[tensor.index] = name
        self.admit(tensor, t.shape_place or t.place, f"{'param' if is_param else 'input'} {name!r}")
        return tensor

    def concrete_shape(self, shape: tuple, dims: dict, name: str, place: Place) -> tuple:
        return tuple(self.dim_value(n, dims, place) for n in shape)

    def dim_value(self, value, dims: dict, place: Place):
        if isinstance(value, str):
            if value not in dims:
                raise self.fail(f"unknown dim {value!r}{did_you_mean(value, dims)}", place)
            return dims[value]
        return value

    def admit(self, tensor: Tensor, at, what: str = "a tensor", name: str = "") -> None:
        """Refuse absurd tensors and runaway graphs as they are recorded. The tensor is called
        ``what + name`` (given apart: joined only for a message, not for every node); with
        ``what`` empty, it is the result of the user's call at ``at``, a place in an imported
        model's Python file, whose graph lines the user never wrote."""
        if 0 < tensor.size <= MAX_ELEMENTS and len(self.tape.nodes) <= MAX_NODES:
            return
        line, col = (at.line, at.col) if isinstance(at, Place) else (at.lineno, at.col_offset)
        path = getattr(at, "file", None) or self.path
        if tensor.size == 0:     # w[3:] of [3]: no op has a meaning for it, mean divides by 0
            shape = list(tensor.shape)
            if not what:
                raise ModelError(f"this call gives shape {shape}, an empty tensor: gradflow needs at least one "
                                 "element in every tensor (torch allows empty ones)", path, line, col)
            made = "the subscript" if tensor.op is None or tensor.op.name == "getitem" else tensor.op.name
            raise ModelError(f"{what}{name}: {made} gives shape {shape}, an empty tensor: "
                             "every tensor needs at least one element", path, line, col)
        if tensor.size > MAX_ELEMENTS and not what:   # the dims are the YAML's: not the user's words here
            raise ModelError(f"this call gives shape {list(tensor.shape)}: {tensor.size:.3g} elements, more than "
                             f"gradflow's limit of {MAX_ELEMENTS:.0e} for one tensor", path, line, col)
        if tensor.size > MAX_ELEMENTS:
            raise ModelError(f"{what}{name} has shape {list(tensor.shape)}: {tensor.size:.3g} elements, more than "
                             f"{MAX_ELEMENTS:.0e}; check the dims", path, line, col)
        raise ModelError(f"the graph grows past {MAX_NODES:,} nodes while expanding modules: "
                         "check repeat counts and nested module calls", path, line, col)

    def max_nodes(self) -> int:
        """The node limit, for ``repeat`` in modules.py: that module is imported here, so it
        cannot import this one's constant; read at call time, as ``admit`` reads it."""
        return MAX_NODES

    def seed_for(self, entry: str, node: ast.AST) -> int:
        """A dropout mask's seed: the model seed, the entry and the call's place."""
        text = f"{self.model.seed}/{entry}/{node.lineno}/{node.col_offset}/{len(self.tape.nodes)}"
        return int.from_bytes(sha256(text.encode()).digest()[:4], "little")



def mean_hint(name: str, entry, step: bool) -> str:
    """How to reduce a non-scalar loss, written in the model's own terms: the forward's
    for a Python step, whose model file the user never sees."""
    if step:
        return f"return {name}.mean() from forward"
    try:
        text = ast.unparse(entry.tree) if entry.tree is not None else ""
    except RecursionError:     # a very long expression: no short hint to give
        text = ""
    if len(entry.targets) == 1 and 0 < len(text) <= 60:
        return f"{name}: mean({text})"
    return f"a new graph entry {name}_mean: mean({name}), listed under losses"


def build(spec: ModelSpec, dims: dict | None = None, seed: int | None = None, dtype=np.float64) -> Model:
    with gc_paused():
        return Builder(spec, dims, seed, dtype).build()

