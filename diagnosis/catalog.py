"""The pattern catalog: what a pattern is, and the registry of all of them.

A pattern is defined once, in `diagnosis/patterns/<layer>.py`, as a `Pattern`: its id, layer,
title, why it matters, the metrics it reads, its thresholds (levelled: notice / warning /
critical, each with a unit and a direction) and parameters (single values that shape the test),
how it picks its evidence, its recommendations ordered by expected effect, and the `check`
function that decides. The generated references (`witty-profiler patterns --markdown`) and the
TOML override validation read these same objects, so documentation and behaviour cannot drift.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from witty_profiler.diagnosis.models import LAYERS, Evidence
from witty_profiler.topology.models import Fields

if TYPE_CHECKING:
    from witty_profiler.diagnosis.scope import Scope

LEVELS = ("critical", "warning", "notice")


class Threshold(NamedTuple):  # not a dataclass: `convert` and `diagnose` import this module
    """A levelled threshold. `above`: the value must exceed the level to reach it (strictly);
    `below`: the value must be under it (strictly). A level of None is not used."""

    name: str
    unit: str
    direction: Literal["above", "below"]
    help: str
    critical: float | None = None
    warning: float | None = None
    notice: float | None = None

    def levels(self) -> dict[str, float]:
        return {lv: getattr(self, lv) for lv in LEVELS if getattr(self, lv) is not None}

    def describe(self) -> str:
        sign = ">" if self.direction == "above" else "<"
        parts = [f"{lv} {sign} {with_unit(number(v), self.unit)}" for lv, v in self.levels().items()]
        return ", ".join(parts)


class Param(NamedTuple):
    """A single value that shapes a pattern's test (a minimum activity, a filter)."""

    name: str
    value: float
    unit: str
    help: str


class Levels(Fields):
    """The effective levels of one threshold (defaults merged with overrides)."""

    _FIELDS = ("threshold", "values")

    def __init__(self, threshold: Threshold, values: dict[str, float]) -> None:
        self.threshold = threshold
        self.values = values

    @property
    def direction(self) -> str:
        return self.threshold.direction

    @property
    def unit(self) -> str:
        return self.threshold.unit

    def severity(self, value: float | None) -> str | None:
        """The highest level the value crosses, or None."""
        if value is None:
            return None
        for lv in LEVELS:
            limit = self.values.get(lv)
            if limit is None:
                continue
            if (self.direction == "above" and value > limit) or (self.direction == "below" and value < limit):
                return lv
        return None

    def limit(self, severity: str | None = None) -> float | None:
        """The level that was crossed (or the lowest one, to show what would fire)."""
        if severity and severity in self.values:
            return self.values[severity]
        for lv in ("notice", "warning", "critical"):
            if lv in self.values:
                return self.values[lv]
        return None


class Verdict(Fields):
    _FIELDS = ("status", "reason", "severity", "description", "evidence", "subjects", "related", "recommendations")

    def __init__(self, status: Literal["finding", "clear", "not_evaluated"], reason: str = "",
                 severity: str | None = None, description: str = "", evidence: list[Evidence] | None = None,
                 subjects: list[str] | None = None, related: list[str] | None = None,
                 recommendations: list[str] | None = None) -> None:
        self.status = status
        self.reason = reason
        self.severity = severity
        self.description = description
        self.evidence = [] if evidence is None else evidence
        self.subjects = [] if subjects is None else subjects
        self.related = [] if related is None else related
        # where the evidence shows a cause the pattern's own advice does not fit (a CPU quota rather
        # than competing processes): the finding's recommendations instead of the pattern's
        self.recommendations = [] if recommendations is None else recommendations


def clear(reason: str) -> Verdict:
    return Verdict("clear", reason=reason)


def not_evaluated(reason: str) -> Verdict:
    return Verdict("not_evaluated", reason=reason)


def finding(severity: str, description: str, evidence: list[Evidence], subjects: list[str] | None = None,
            related: list[str] | None = None, recommendations: list[str] | None = None) -> Verdict:
    return Verdict("finding", reason=description, severity=severity, description=description, evidence=evidence,
                   subjects=sorted(set(subjects or [])), related=sorted(set(related or [])),
                   recommendations=list(recommendations or []))


def worst(*severities: str | None) -> str | None:
    found = [s for s in severities if s]
    return min(found, key=LEVELS.index) if found else None


class Pattern(NamedTuple):
    id: str
    layer: int
    title: str
    why: str
    metrics: tuple[str, ...]
    evidence: str
    recommendations: tuple[str, ...]
    check: Callable[["Scope", dict[str, Any]], Verdict]
    thresholds: tuple[Threshold, ...] = ()
    params: tuple[Param, ...] = ()
    needs: str = ""  # what data it needs beyond /proc (PMU, eBPF, a device...), for the docs
    cross_host: bool = False  # compares hosts (their digests) rather than judging one host

    @property
    def layer_name(self) -> str:
        return LAYERS[self.layer - 1][1]

    @property
    def layer_title(self) -> str:
        return LAYERS[self.layer - 1][2]

    def threshold(self, name: str) -> Threshold:
        return next(t for t in self.thresholds if t.name == name)

    def defaults(self) -> dict[str, Any]:
        """name -> Levels for thresholds, name -> value for params."""
        values: dict[str, Any] = {t.name: Levels(t, t.levels()) for t in self.thresholds}
        values.update({p.name: p.value for p in self.params})
        return values


_MODULES = [name for _, name, _ in LAYERS]
_CATALOG: dict[str, Pattern] | None = None


def catalog() -> dict[str, Pattern]:
    """All patterns by id, in layer order then definition order."""
    global _CATALOG
    if _CATALOG is None:
        found: dict[str, Pattern] = {}
        for module in _MODULES:
            for pattern in importlib.import_module(f"{__package__}.patterns.{module}").PATTERNS:
                if pattern.id in found:
                    raise RuntimeError(f"pattern {pattern.id} is defined twice")
                if not pattern.id.startswith(pattern.layer_name + "."):
                    raise RuntimeError(f"pattern {pattern.id} is not named after its layer {pattern.layer_name}")
                found[pattern.id] = pattern
        _CATALOG = found
    return _CATALOG


def with_unit(text: str, unit: str | None) -> str:
    """A number with its unit as a sentence reads it: '12 %', '3 ms', '685/s', a ratio bare."""
    if not unit or unit == "ratio":
        return text
    if unit == "1/s":
        return f"{text}/s"
    return f"{text} {unit}"


def number(value: float) -> str:
    """A threshold as people write it: 65536 not 65536.0 nor 6.5536e+04, 0.8 not 0.80000001."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.6g}"
