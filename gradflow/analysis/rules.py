"""The GF1xx rules of ``gradflow check``: each check is one function from the
analysed model to findings (their ids, defaults and settings: ``settings.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gradflow.analysis.flow import nodes_of, told
from gradflow.analysis.globs import glob_hint, glob_matches
from gradflow.analysis.report import Finding, listing
from gradflow.analysis.settings import Settings


@dataclass(eq=False, repr=False)
class Context:
    """What a rule sees, and the findings it makes: one per cause, listing what it affects."""
    report: object
    model: object
    settings: Settings
    trained_elsewhere: frozenset = frozenset()   # parameters a loss left out (--loss) sends gradient into
    found: list = field(default_factory=list)
    groups: dict = field(default_factory=dict)   # (rule, cause key) -> [names, place, message, where]

    def add(self, rule: str, message: str, place, params: list | None = None, **where) -> None:
        severity = self.settings.severity(rule)
        if severity != "off":
            line, col = place if isinstance(place, tuple) else (place.line, place.col)
            file = getattr(place, "file", None) or self.model.path
            if params is None:
                params = [where["param"]] if where.get("param") else []
            where["param"] = params[0] if len(params) == 1 else None
            self.found.append(Finding(rule, severity, message, self.model.path, line, col, file=file,
                                      params=list(params), **where))

    def group(self, rule: str, key, name: str, place, message, **where) -> None:
        """Gather ``name`` under one finding per (rule, key): ``message(names)`` writes it."""
        entry = self.groups.setdefault((rule, key), [[], place, message, where])
        entry[0].append(name)

    def flush(self) -> None:
        for (rule, _), (names, place, message, where) in self.groups.items():
            loss = where.pop("command", None) or where.get("loss")   # the loss `gradflow why` looks at
            command = explain(self, names, loss) if rule in EXPLAINED else None
            self.add(rule, message(names), place, params=names, command=command, **where)
        self.groups.clear()


EXPLAINED = ("GF100", "GF102", "GF103", "GF107")   # findings whose paths `gradflow why` shows


def matches(glob: str, names) -> list:
    return [n for n in names if glob_matches(n, glob)]


def trainable(model) -> set:
    """Parameters some loss declares in its wrt; every parameter when no loss declares wrt.
    A frozen parameter is never trainable."""
    declared = [l.wrt for l in model.spec.losses.values() if l.wrt is not None]
    if not declared:
        return set(model.params) - model.frozen
    return {n for wrt in declared for glob, _ in wrt for n in matches(glob, model.params)} - model.frozen


def places(cuts, path) -> str:
    return " and ".join(told(cuts, path))


def cause(pair) -> tuple:
    """What makes a pair what it is, as a key: findings with one cause are one finding."""
    cuts = pair.cut_by if pair.status == "blocked" else pair.dies_at if pair.status == "zero" else ()
    return (pair.status, tuple((c.index, c.zeros) for c in cuts))   # zeros: which factor, said too


def dying(pair, path: str | None) -> str:
    """Why a zero gradient is zero: where it dies, or, where ``dies_at`` names no place, that
    its paths' gradients are not zero but cancel in the parameter itself."""
    if pair.dies_at:
        return f"it dies at {places(pair.dies_at, path)}"
    return "the paths' gradients cancel each other out"


def why(pair, path: str | None = None) -> str:
    """A short reason for a pair's status, for messages (``path``: the model file, whose
    places are shown as lines; others as FILE:LINE:COL)."""
    if pair.status == "blocked":
        return "blocked by " + places(pair.cut_by, path)
    if pair.status == "unreachable":
        return "no path leads to the loss"
    if pair.status == "zero":
        return f"the gradient is exactly zero; {dying(pair, path)}"
    return "gradient flows" + (f" (norm {pair.norm:.3g})" if pair.norm is not None else "")


def reason(pair, loss: str, many: bool, path: str | None, them: str = "") -> str:
    """The cause of a pair's status as the end of a sentence about one or several parameters
    (``them``: how to name the parameters; a pronoun by default)."""
    them = them or ("them" if many else "it")
    if pair.status == "blocked":
        verb = "block" if len(pair.cut_by) > 1 else "blocks"
        return f"{places(pair.cut_by, path)} {verb} {them}"
    if pair.status == "unreachable":
        return f"no path leads from {them} to {loss}"
    if pair.status == "zero":
        return f"{'their' if many else 'its'} gradient is exactly zero ({dying(pair, path)})"
    return f"gradient flows into {them}"


def explain(ctx: Context, names: list, loss: str) -> str:
    """The command that shows every path behind a finding (kept beside the message)."""
    return f"gradflow why {quoted(ctx.model.path)} {names[0]} --loss {loss}"


def quoted(path: str) -> str:
    return path if all(c.isalnum() or c in "/._-:+" for c in path) else "'" + path.replace("'", "'\\''") + "'"


def check_expect(ctx: Context) -> None:
    report, model = ctx.report, ctx.model
    structural = report.model["mode"] == "structural"
    for loss, statuses in model.spec.expect.items():
        claimed = {}   # parameter -> (status, glob) of the first glob that matched it
        for status, globs in statuses.items():
            for glob, place in globs:
                names = matches(glob, model.params)
                if not names:
                    ctx.add("GF101", f"expect {loss}.{status}: {glob!r} matches no parameter"
                            f"{glob_hint(glob, model.params)}", place, loss=loss)
                for name in names:
                    first = claimed.setdefault(name, (status, glob))
                    if first[0] != status:   # one parameter, two statuses: one of them is a slip
                        ctx.group("GF101", ("both", loss, first, status, glob), name, place,
                                  lambda names, first=first, status=status, glob=glob, loss=loss: (
                                      f"expect {loss}: {listing(names)} {'is' if len(names) == 1 else 'are'} "
                                      f"under {first[0]} ({first[1]!r}) and under {status} ({glob!r}); "
                                      "a parameter has one status"), loss=loss)
                    pair = report.pair(name, loss)   # and GF100 still says which of the two is wrong
                    # Structure alone cannot tell a zero gradient from a flowing one.
                    if pair.status == status or (structural and {status, pair.status} == {"flows", "zero"}):
                        continue
                    ctx.group("GF100", (loss, status, cause(pair)), name, place, expected(ctx, loss, status, pair),
                              loss=loss)
    ctx.flush()


def expected(ctx: Context, loss: str, status: str, pair):
    words = {"flows": f"{loss} to train", "zero": f"a zero gradient from {loss} into",
             "blocked": f"{loss} to be blocked from", "unreachable": f"no path from {loss} to"}[status]
    return lambda names: (f"expected {words} {listing(names)}, but "
                          f"{reason(pair, loss, len(names) > 1, ctx.model.path)}")


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
                        f"{glob_hint(glob, model.params)}", place, loss=loss.name)
            for name in names:
                inside.add(name)
                if name in model.frozen:
                    ctx.group("GF101", ("frozen", loss.name, glob), name, place,
                              lambda names, glob=glob, of=loss.name: frozen_in_wrt(model, of, glob, names), loss=loss.name)
                    continue
                pair = report.pair(name, loss.name)
                # A zero gradient still arrives along a path: GF107's warning, as for GF102.
                if pair.status in ("blocked", "unreachable"):
                    ctx.group("GF103", (loss.name, cause(pair)), name, place, untrained(ctx, loss.name, pair),
                              loss=loss.name)
        outside = [name for name in model.params if name not in inside and name not in model.frozen
                   and report.pair(name, loss.name).status == "flows"]
        if outside:
            check_outside(ctx, loss, outside)
    ctx.flush()


def frozen_in_wrt(model, loss: str, glob: str, names: list) -> str:
    one = len(names) == 1
    it = "it" if one else "them"
    # a step's parameter is frozen as backward finds it: as the module had it, or as forward left it
    # (pix2pix's set_requires_grad(netD, False) never set back)
    why = "requires_grad is False when backward runs, so no optimizer updates" if model.spec.step \
        else "no optimizer updates"
    unfreeze = f"call requires_grad_(True) on {it} before backward" if model.spec.step else "drop frozen: true"
    return (f"{loss}: wrt {glob!r} includes {listing(names)}, which {'is' if one else 'are'} frozen ({why} "
            f"{it}): leave {it} out of wrt, or {unfreeze}")


def untrained(ctx: Context, loss: str, pair):
    def message(names):
        many = len(names) > 1
        if pair.status == "blocked":
            text = (f"{reason(pair, loss, many, ctx.model.path, listing(names))} from {loss}, which is "
                    f"meant to train {'them' if many else 'it'}")
        else:
            text = f"{loss} is meant to train {listing(names)}, but {reason(pair, loss, many, ctx.model.path)}"
        return text
    return message


def check_outside(ctx: Context, loss, names: list) -> None:
    """GF104, once per loss: the parameters it sends gradient into beyond its wrt."""
    one = len(names) == 1
    them = "it" if one else "them"
    silence = "pass --ignore GF104" if ctx.model.spec.step else "ignore GF104 in check:"   # a step has no check: block
    message = (f"{loss.name} sends gradient into {listing(names)}, outside its wrt: either a stop_gradient "
               f"(detach) is missing where {'its' if one else 'their'} output enters {loss.name}, or, if each "
               f"training step applies only its own parameters' gradients, this is harmless (add {them} "
               f"to the wrt, or {silence})")
    ctx.add("GF104", message, ctx.model.sources[names[0]], params=names, loss=loss.name)


def check_params(ctx: Context) -> None:
    report, model, settings = ctx.report, ctx.model, ctx.settings
    train = trainable(model)
    path = model.path
    for p in report.params:
        place = model.sources[p.name]
        # A zero gradient still arrives along a path: that is GF107's warning, not this error.
        if p.name in train and p.name not in ctx.trained_elsewhere and all(
                pair.status in ("blocked", "unreachable") for pair in p.grads.values()):
            key = tuple((loss, cause(pair)) for loss, pair in p.grads.items())
            # The losses it has no path to are named together, after the cuts that tell.
            apart = [loss for loss, pair in p.grads.items() if pair.status == "unreachable"]
            reasons = "; ".join([f"from {loss}, {why(pair, path)}" for loss, pair in p.grads.items()
                                 if pair.status != "unreachable"]
                                + ([f"no path leads to {listing(apart)}"] if apart else []))
            # The path to show is the one from a loss meant to train it, not an intended block;
            # a cut tells more than no path at all.
            problems = [loss for loss in p.grads if report.intent(p.name, loss) == "problem"] or list(p.grads)
            shown = next((loss for loss in problems if p.grads[loss].status == "blocked"), problems[0])
            ctx.group("GF102", key, p.name, place,
                      lambda names, reasons=reasons: (
                          f"{listing(names)} receive{'s' if len(names) == 1 else ''} gradient from no loss: "
                          f"{reasons}"), command=shown)
        for loss, pair in p.grads.items():
            # a frozen parameter's gradient is never applied: how large it is, or that it is zero, is
            # no finding (the parameters behind it have their own); a NaN in it still is
            if pair.status == "zero" and p.name not in model.frozen:
                ctx.group("GF107", (loss, cause(pair)), p.name, place,
                          lambda names, loss=loss, pair=pair: (
                              f"the gradient from {loss} into {listing(names)} is exactly zero; {dying(pair, path)}"),
                          loss=loss)
            if pair.nonfinite:
                ctx.group("GF105", loss, p.name, place, lambda names, loss=loss: (
                    f"{loss}: the gradient of {listing(names)} has NaN or infinite entries"), loss=loss)
            elif pair.status == "flows" and pair.norm is not None and p.name not in model.frozen:
                if pair.norm < settings.vanishing:
                    ctx.group("GF108", loss, p.name, place, lambda names, loss=loss: (
                        f"{loss}: vanishing gradient (L2 norm below {settings.vanishing:g}) into "
                        f"{with_norms(report, names, loss)}"), loss=loss)
                elif pair.norm > settings.exploding:
                    ctx.group("GF109", loss, p.name, place, lambda names, loss=loss: (
                        f"{loss}: exploding gradient (L2 norm above {settings.exploding:g}) into "
                        f"{with_norms(report, names, loss)}"), loss=loss)
    ctx.flush()


def with_norms(report, names: list, loss: str) -> str:
    shown = [f"{n} (norm {report.pair(n, loss).norm:.3g})" for n in names[:6]]
    return ", ".join(shown) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def check_wired(ctx: Context) -> None:
    """GF110: a loss whose every pair is blocked or unreachable trains nothing at all, unless it
    says so itself with an empty wrt (a metric: a logged KL, an accuracy)."""
    model = ctx.model
    for loss in ctx.report.losses:
        if model.spec.losses[loss.name].wrt == []:
            continue
        pairs = [p.grads[loss.name] for p in ctx.report.params]
        if any(pair.status in ("flows", "zero") for pair in pairs):
            continue
        cuts = {c.index: c for pair in pairs for c in pair.cut_by}
        why_not = ("; every path is cut by " + places([c for _, c in sorted(cuts.items())], model.path)
                   if cuts else "; no parameter is on any path to it")
        spec = model.spec.losses[loss.name]
        ctx.add("GF110", f"{loss.name} trains nothing: it sends gradient into no parameter{why_not}",
                spec.source or spec.place, loss=loss.name)


def check_losses_and_stops(ctx: Context) -> None:
    for loss in ctx.report.losses:
        if loss.value is not None and not math.isfinite(loss.value):
            spec = ctx.model.spec.losses[loss.name]
            place = spec.source or spec.place
            value = "NaN" if math.isnan(loss.value) else f"{loss.value:+}"     # 'NaN', '+inf', '-inf'
            ctx.add("GF105", f"{loss.name}: the loss is {value}", place, loss=loss.name)   # as its gradients
    redundant = {}   # one line of a loop, or of a module repeated, is one finding
    for stop in ctx.report.stops:
        if stop.redundant:
            redundant.setdefault((stop.cut.op, stop.cut.file, stop.cut.line, stop.cut.col), []).append(stop.cut)
    for cuts in redundant.values():
        c = cuts[0]
        ctx.add("GF106", f"{c.op} in {nodes_of(cuts)} cuts no parameter from any loss: it is redundant", c,
                node=c.node)


CHECKS = (check_expect, check_wrt, check_params, check_wired, check_losses_and_stops)


def evaluate(report, model, settings: Settings, trained_elsewhere=frozenset()) -> list:
    """All findings for one analysed model, sorted by place. ``trained_elsewhere``: the parameters
    that losses left out of the report send gradient into (no GF102 for them)."""
    ctx = Context(report, model, settings, frozenset(trained_elsewhere))
    for check in CHECKS:
        check(ctx)
    return sorted(ctx.found, key=lambda f: (f.file, f.line, f.col, f.rule))
