"""The GF1xx rules of ``gradflow check``: each check is one function from the
analysed model to findings (their ids, defaults and settings: ``settings.py``).
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field

from gradflow.analysis.report import Finding
from gradflow.analysis.settings import Settings
from gradflow.errors import did_you_mean


@dataclass
class Context:
    """What a rule sees."""
    report: object
    model: object
    settings: Settings
    found: list = field(default_factory=list)

    def add(self, rule: str, message: str, place, **where) -> None:
        severity = self.settings.severity(rule)
        if severity != "off":
            line, col = place if isinstance(place, tuple) else (place.line, place.col)
            file = getattr(place, "file", None) or self.model.path
            self.found.append(Finding(rule, severity, message, self.model.path, line, col, file=file, **where))


def matches(glob: str, names) -> list:
    return [n for n in names if fnmatch.fnmatchcase(n, glob)]


def trainable(model) -> set:
    """Parameters some loss declares in its wrt; every parameter when no loss declares wrt.
    A frozen parameter is never trainable."""
    declared = [l.wrt for l in model.spec.losses.values() if l.wrt is not None]
    if not declared:
        return set(model.params) - model.frozen
    return {n for wrt in declared for glob, _ in wrt for n in matches(glob, model.params)} - model.frozen


def why(pair, path: str | None = None) -> str:
    """A short reason for a pair's status, for messages (``path``: the model file, whose
    places are shown as lines; others as FILE:LINE:COL)."""
    if pair.status == "blocked":
        return "blocked by " + ", ".join(f"{c.op} in {c.node} ({c.where(path)})" for c in pair.cut_by)
    if pair.status == "unreachable":
        return "no path from the parameter to the loss"
    if pair.status == "zero":
        where = ", ".join(f"{c.op} in {c.node} ({c.where(path)})" for c in pair.dies_at)
        return "the gradient is exactly zero" + (f"; it dies at {where}" if where else "")
    return "gradient flows" + (f" (norm {pair.norm:.3g})" if pair.norm is not None else "")


def actual(pair, path: str | None = None) -> str:
    """What a pair really is, phrased to follow "expected X to be S, but ..."."""
    if pair.status == "flows":
        return why(pair, path)
    if pair.status == "unreachable":
        return f"it is unreachable: {why(pair, path)}"
    return f"it is {why(pair, path)}" if pair.status == "blocked" else f"it is zero: {why(pair, path)}"


def check_expect(ctx: Context) -> None:
    report, model = ctx.report, ctx.model
    structural = report.model["mode"] == "structural"
    for loss, statuses in model.spec.expect.items():
        for status, globs in statuses.items():
            for glob, place in globs:
                names = matches(glob, model.params)
                if not names:
                    ctx.add("GF101", f"expect {loss}.{status}: {glob!r} matches no parameter"
                            f"{did_you_mean(glob, model.params)}", place, loss=loss)
                for name in names:
                    pair = report.pair(name, loss)
                    # Structure alone cannot tell a zero gradient from a flowing one.
                    if pair.status == status or (structural and {status, pair.status} == {"flows", "zero"}):
                        continue
                    ctx.add("GF100", f"{loss}: expected {name} to be {status}, but {actual(pair, model.path)}",
                            place, loss=loss, param=name)


def check_wrt(ctx: Context) -> None:
    report, model = ctx.report, ctx.model
    for loss in model.spec.losses.values():
        if loss.wrt is None:
            continue
        inside = set()
        for glob, place in loss.wrt:
            names = matches(glob, model.params)
            if not names:
                ctx.add("GF101", f"{loss.name}: wrt {glob!r} matches no parameter"
                        f"{did_you_mean(glob, model.params)}", place, loss=loss.name)
            for name in names:
                inside.add(name)
                if name in model.frozen:
                    ctx.add("GF101", f"{loss.name}: wrt {glob!r} includes {name}, which is frozen "
                            "(no optimizer updates it): leave it out of wrt, or drop frozen: true",
                            place, loss=loss.name, param=name)
                    continue
                pair = report.pair(name, loss.name)
                if pair.status != "flows":
                    ctx.add("GF103", f"{loss.name} is meant to train {name} (wrt) but sends it no gradient: "
                            f"{why(pair, model.path)}", place, loss=loss.name, param=name)
        outside = [name for name in model.params if name not in inside and name not in model.frozen
                   and report.pair(name, loss.name).status == "flows"]
        if outside:
            check_outside(ctx, loss, outside)


def check_outside(ctx: Context, loss, names: list) -> None:
    """GF104, once per loss: the parameters it sends gradient into beyond its wrt."""
    listed = ", ".join(names)
    one = len(names) == 1
    message = (f"{loss.name} sends gradient into {listed}, outside its wrt. If {loss.name} must not "
               f"train {'it' if one else 'them'}, a stop_gradient (detach) is missing where "
               f"{'its' if one else 'their'} output enters {loss.name}; if each training step applies "
               f"only its own parameters' gradients, this is harmless: add {'it' if one else 'them'} to "
               "the wrt, or silence it with ignore: [GF104] under check:")
    ctx.add("GF104", message, ctx.model.sources[names[0]], loss=loss.name, param=names[0] if one else None)


def check_params(ctx: Context) -> None:
    report, model, settings = ctx.report, ctx.model, ctx.settings
    train = trainable(model)
    for p in report.params:
        place = model.sources[p.name]
        # A zero gradient still arrives along a path: that is GF107's warning, not this error.
        if p.name in train and all(pair.status in ("blocked", "unreachable") for pair in p.grads.values()):
            reasons = "; ".join(f"{loss}: {why(pair, model.path)}" for loss, pair in p.grads.items())
            ctx.add("GF102", f"{p.name} receives gradient from no loss ({reasons})", place, param=p.name)
        for loss, pair in p.grads.items():
            where = {"loss": loss, "param": p.name}
            if pair.status == "zero":
                ctx.add("GF107", f"{loss} -> {p.name}: {why(pair, model.path)}", place, **where)
            if pair.nonfinite:
                ctx.add("GF105", f"{loss} -> {p.name}: {pair.nonfinite} gradient entries are NaN or "
                        "infinite", place, **where)
            elif pair.status == "flows" and pair.norm is not None:
                if pair.norm < settings.vanishing:
                    ctx.add("GF108", f"{loss} -> {p.name}: vanishing gradient, norm {pair.norm:.3g} "
                            f"< {settings.vanishing:g}", place, **where)
                elif pair.norm > settings.exploding:
                    ctx.add("GF109", f"{loss} -> {p.name}: exploding gradient, norm {pair.norm:.3g} "
                            f"> {settings.exploding:g}", place, **where)


def check_wired(ctx: Context) -> None:
    """GF110: a loss whose every pair is blocked or unreachable trains nothing at all."""
    model = ctx.model
    for loss in ctx.report.losses:
        pairs = [p.grads[loss.name] for p in ctx.report.params]
        if any(pair.status in ("flows", "zero") for pair in pairs):
            continue
        cuts = {c.index: c for pair in pairs for c in pair.cut_by}
        why_not = ("; every path is cut by " + ", ".join(f"{c.op} in {c.node} ({c.where(model.path)})"
                                                        for _, c in sorted(cuts.items()))
                   if cuts else "; no parameter is on any path to it")
        spec = model.spec.losses[loss.name]
        ctx.add("GF110", f"{loss.name} trains nothing: it sends gradient into no parameter{why_not}",
                spec.source or spec.place, loss=loss.name)


def check_losses_and_stops(ctx: Context) -> None:
    for loss in ctx.report.losses:
        if loss.value is not None and not math.isfinite(loss.value):
            spec = ctx.model.spec.losses[loss.name]
            place = spec.source or spec.place
            ctx.add("GF105", f"loss {loss.name} is {loss.value}", place, loss=loss.name)
    for stop in ctx.report.stops:
        if stop.redundant:
            c = stop.cut
            ctx.add("GF106", f"{c.op} in {c.node} cuts no parameter from any loss: it is redundant",
                    c, node=c.node)


CHECKS = (check_expect, check_wrt, check_params, check_wired, check_losses_and_stops)


def evaluate(report, model, settings: Settings) -> list:
    """All findings for one analysed model, sorted by place."""
    ctx = Context(report, model, settings)
    for check in CHECKS:
        check(ctx)
    return sorted(ctx.found, key=lambda f: (f.file, f.line, f.col, f.rule))
