"""analyze(): a built Model -> Report.

Structure decides flows / blocked / unreachable (``flow.py``); a numeric run then
tells ``zero`` from ``flows`` and adds the numbers (``numeric.py``); the rules turn
the result into findings (``rules.py``).
"""

from __future__ import annotations

import numpy as np

from gradflow.analysis.flow import Graph
from gradflow.analysis.numeric import dies_at, grad_stats
from gradflow.analysis.report import LossReport, Pair, ParamReport, Report, StopReport
from gradflow.analysis.rules import evaluate
from gradflow.analysis.settings import Settings, settings_for
from gradflow.engine import quiet
from gradflow.model.files import human_bytes
from gradflow.model.spec import Place

GIB = 1024 ** 3


def analyze(model, structural: bool = False, counterfactual: bool = True,
            settings: Settings | None = None, version: str = "") -> Report:
    """Analyse every (parameter, loss) pair of ``model``."""
    # NaN and overflow are findings (GF105), not console noise: the statistics too.
    with quiet():
        return analyze_quietly(model, structural, counterfactual, settings, version)


def analyze_quietly(model, structural, counterfactual, settings, version) -> Report:
    settings = settings or settings_for(model)
    if not structural:
        ensure_values(model, settings.max_memory)
    graph = Graph(model.tape, model.params)
    stops = [model.tape.nodes[c.index] for c in graph.all_cuts() if c.kind == "explicit"]
    held = {s.index for s in stops}     # the plain sweep keeps what reaches each stop
    pairs = {name: {} for name in model.params}
    per_loss, grads_kept = {}, {}
    for loss_name, loss in model.losses.items():
        flow = graph.flow(loss)
        # The sweeps themselves, not backward(): this runs inside quiet() already.
        grads = None if structural else model.tape.sweep(loss, keep=held)
        every = Lazy(lambda: model.tape.sweep(loss, keep=True))   # only where a gradient dies
        for name, t in model.params.items():
            pair = pairs[name][loss_name] = pair_of(name, t, flow, grads, graph, every)
            if grads is not None and pair.status in ("flows", "zero"):
                grads_kept[(loss_name, name)] = grads[t.index]
        norms = None
        if grads is not None and counterfactual:
            # Imported here: the row walk behind these numbers loads only for runs that print them.
            from gradflow.analysis.counterfactual import counterfactuals
            norms = counterfactuals(model, grads, flow, stops, held, {n: pairs[n][loss_name] for n in pairs})
        per_loss[loss_name] = (flow, norms)
    lines = model.sources if model.spec.step else model.places   # a step's model file is never seen
    params = [ParamReport(n, t.shape, t.size, lines[n].line, pairs[n], n in model.frozen)
              for n, t in model.params.items()]
    # Losses left out of the report (--loss) still count: a stop that cuts a parameter from one
    # is not redundant (GF106), a parameter one trains is not left without gradient (GF102).
    left_out = [graph.flow(loss) for loss in model.left_out.values()]
    cutting = {cut for flow in left_out for cut, names in flow.behind.items() if names}
    trained = {name for flow in left_out for name, t in model.params.items() if t.index in flow.open}
    report = Report(model_info(model, structural), loss_reports(model, structural), params,
                    stop_reports(graph, per_loss, cutting), grads=grads_kept, version=version,
                    settings=settings, values=values_of(model))
    report.findings = evaluate(report, model, settings, trained)
    return report


class Lazy:
    """A value computed on first use."""

    def __init__(self, compute):
        self.compute, self.done, self.value = compute, False, None

    def get(self):
        if not self.done:
            self.value, self.done = self.compute(), True
        return self.value


def pair_of(name, t, flow, grads, graph, every: Lazy) -> Pair:
    """One (parameter, loss) pair: status and cuts from structure, numbers from ``grads``."""
    pair = Pair(flow.status(t))
    cuts = flow.cuts_of(name)
    if pair.status == "blocked":
        pair.cut_by = cuts
    elif pair.status == "flows":
        pair.partially_cut_by = cuts
        pair.partly_told = [c for c in cuts if not graph.rejoined(c)]
    if grads is not None:
        fill_numbers(pair, grads, t, graph, flow, every)
    return pair


def ensure_values(model, max_memory: float) -> None:
    """Refuse a numeric run that would not fit, then run the forward pass once."""
    if model.materialized:
        return
    need = model.memory_estimate()
    if need > max_memory:
        largest = max(model.tape.nodes, key=lambda n: n.size)   # point where the bytes are
        info = largest.meta
        where = f" (its largest tensor is {info.entry} {list(largest.shape)}, made on this line)" if info else ""
        # A parameter or input is where its source says (an imported step's Python line), an op where it ran.
        place = model.sources.get(info.entry) if info and info.call is None else None
        place = place or info or Place(1, 1)
        raise model.error(f"a numeric run needs about {human_bytes(need)}, more than the limit of "
                          f"{human_bytes(max_memory)}{where}: use --structural, or {smaller(model.spec)} "
                          "(or raise --max-memory)", place)
    model.materialize()


def smaller(spec) -> str:
    """How this model can be made smaller: --dim sets only a model file's top-level dims."""
    if spec.step:
        return "a smaller model or batch in the step"
    return "smaller dims with --dim NAME=INT" if spec.dims else "smaller shapes in the file"


def fill_numbers(pair: Pair, grads: list, t, graph, flow, every: Lazy) -> None:
    g = grads[t.index] if t.index < len(grads) else None
    if pair.status != "flows" or g is None:
        pair.norm, pair.max_abs, pair.zero_fraction, pair.nonfinite = 0.0, 0.0, 1.0, 0
        return
    for key, value in grad_stats(g).items():
        setattr(pair, key, value)
    if pair.zero_fraction == 1.0:   # every entry exactly zero, counted already: no pass more
        pair.status = "zero"
        pair.dies_at = dies_at(graph, every.get(), t, flow.open)


def stop_reports(graph, stop_cuts: dict, elsewhere=frozenset()) -> list:
    """A report per cut; ``elsewhere``: the cuts that cut a parameter from a loss left out."""
    cuts = {c.index: c for c in graph.all_cuts()}
    for flow, _ in stop_cuts.values():
        cuts.update({c.index: c for c in flow.behind})
    reports, position = [], {name: k for k, name in enumerate(graph.params)}
    for index in sorted(cuts):
        cut, per_loss = cuts[index], {}
        for loss_name, (flow, norms) in stop_cuts.items():
            names = sorted(flow.behind.get(cut, ()), key=position.__getitem__)   # in file order
            blocks = [n for n in names if graph.params[n].index not in flow.open]
            partial = [n for n in names if graph.params[n].index in flow.open]
            norm = None if norms is None or cut.kind != "explicit" else norms.get(index, 0.0)
            per_loss[loss_name] = {"blocks": blocks, "partial": partial, "cut_norm": norm}
        redundant = cut.kind == "explicit" and cut not in elsewhere and not any(
            v["blocks"] or v["partial"] for v in per_loss.values())
        reports.append(StopReport(cut, per_loss, redundant))
    return reports


def model_info(model, structural: bool) -> dict:
    return {"name": model.name, "description": model.spec.description, "path": model.path,
            "mode": "structural" if structural else "numeric", "seed": model.seed, "dims": dict(model.dims), "nodes": len(model.tape.nodes),
            "params": len(model.params), "param_count": model.param_count}


def values_of(model) -> str:
    """Where the values come from, as a header says it: the seed of the inits, or the step's
    own tensors, and the --weights archive over either."""
    given = "the step's tensors" if model.spec.step else f"seed {model.seed}"
    return given + (f", weights {model.weights_from}" if model.weights_from else "")


def loss_reports(model, structural: bool) -> list:
    out = []
    for name, spec in model.spec.losses.items():
        value = None if structural else float(np.asarray(model.losses[name].value))
        wrt = None if spec.wrt is None else [glob for glob, _ in spec.wrt]
        expect = {status: [glob for glob, _ in globs] for status, globs in model.spec.expect.get(name, {}).items()}
        place = spec.source if model.spec.step and spec.source is not None else spec.place   # as params'
        out.append(LossReport(name, value, place.line, wrt, expect))
    return out
