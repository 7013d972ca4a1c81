"""The GF1xx rules of ``gradflow check``, their settings, and where settings come from.

Settings, lowest precedence first: the defaults below, ``[tool.gradflow]`` in the
nearest ``pyproject.toml``, the model file's ``check:`` block, then the command
line. Each rule is one function from (report, model, settings) to findings.
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from gradflow.analysis.report import Finding
from gradflow.errors import did_you_mean

# rule id -> (default severity or "off", one-line description)
RULES = {
    "GF100": ("error", "an expect assertion does not hold"),
    "GF101": ("error", "an expect or wrt glob matches no parameter"),
    "GF102": ("error", "a trainable parameter receives gradient from no loss at all"),
    "GF103": ("error", "a parameter in a loss's wrt receives no gradient from that loss"),
    "GF104": ("off", "a loss sends gradient into a parameter outside its wrt"),
    "GF105": ("error", "a loss or gradient is NaN or infinite"),
    "GF106": ("warning", "a stop-gradient is redundant"),
    "GF107": ("warning", "a path exists but the gradient is exactly zero"),
    "GF108": ("warning", "vanishing gradient: norm below `vanishing`"),
    "GF109": ("warning", "exploding gradient: norm above `exploding`"),
}
GIB = 1024 ** 3


@dataclass(frozen=True)
class Settings:
    select: tuple = ()              # rules turned on besides the defaults (e.g. GF104)
    ignore: tuple = ()              # rules turned off
    strict: bool = False            # warnings fail too
    vanishing: float = 1e-7
    exploding: float = 1e3
    max_memory: float = 2 * GIB

    def severity(self, rule: str) -> str:
        """A rule's severity here; `select` turns on a rule that is off by default, as an error."""
        default = RULES[rule][0]
        if rule in self.ignore or (default == "off" and rule not in self.select):
            return "off"
        return "error" if default == "off" else default

    def merged(self, values: dict) -> "Settings":
        """These settings overridden by a `check:` block or [tool.gradflow] table."""
        changes = {}
        for key, value in values.items():
            name = key.replace("-", "_")
            if name not in self.__dataclass_fields__:
                continue
            if name in ("select", "ignore"):
                value = tuple(split_ids(value))
            changes[name] = value
        return replace(self, **changes)


def split_ids(value) -> list:
    items = value.split(",") if isinstance(value, str) else value
    return [str(i).strip().upper() for i in items if str(i).strip()]


def pyproject_settings(start: Path) -> dict:
    """[tool.gradflow] of the nearest pyproject.toml at or above ``start``."""
    for folder in [start, *start.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return read_tool_table(candidate.read_text(encoding="utf-8", errors="replace"))
    return {}


def read_tool_table(text: str) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:      # Python 3.10: read the few simple keys by hand
        return read_tool_table_simply(text)
    try:
        return tomllib.loads(text).get("tool", {}).get("gradflow", {})
    except tomllib.TOMLDecodeError:
        return {}


def read_tool_table_simply(text: str) -> dict:
    out, inside = {}, False
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("["):
            inside = line == "[tool.gradflow]"
        elif inside and "=" in line:
            key, value = (part.strip() for part in line.split("=", 1))
            if value.startswith("["):
                out[key] = re.findall(r"[\"']([^\"']*)[\"']", value)
            elif value in ("true", "false"):
                out[key] = value == "true"
            else:
                try:
                    out[key] = float(value)
                except ValueError:
                    out[key] = value.strip("\"'")
    return out


def settings_for(model, overrides: dict | None = None) -> Settings:
    """Defaults, then [tool.gradflow] of the nearest pyproject.toml, then the model's
    `check:` block, then ``overrides`` (the command line)."""
    settings = Settings().merged(pyproject_settings(Path(model.path).resolve().parent))
    return settings.merged(model.spec.check).merged(overrides or {})


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
        for name in model.params:
            if name not in inside and name not in model.frozen and report.pair(name, loss.name).status == "flows":
                ctx.add("GF104", f"{loss.name} sends gradient into {name}, which is outside its wrt",
                        model.sources[name], loss=loss.name, param=name)


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


CHECKS = (check_expect, check_wrt, check_params, check_losses_and_stops)


def evaluate(report, model, settings: Settings) -> list:
    """All findings for one analysed model, sorted by place."""
    ctx = Context(report, model, settings)
    for check in CHECKS:
        check(ctx)
    return sorted(ctx.found, key=lambda f: (f.file, f.line, f.col, f.rule))
