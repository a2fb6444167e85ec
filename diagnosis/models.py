"""What a diagnosis returns: findings with their evidence, coverage rows, a summary.

These models are the public contract of `witty_profiler.diagnose` and of the JSON report.
Floats are rounded when serialised, and every list is built in a fixed order by the matcher,
so the same graph with the same thresholds always gives the same bytes.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from witty_profiler.topology.models import Fields, copy_value

# the seven layers, bottom up, from the one list every part reads
from witty_profiler.topology.layers import LAYER_NAMES, LAYER_NUMBERS, LAYER_TITLES, LAYERS  # noqa: F401

Severity = Literal["critical", "warning", "notice"]
PRIORITY: dict[str, str] = {"critical": "P0", "warning": "P1", "notice": "P2"}
SEVERITY_RANK: dict[str, int] = {"critical": 0, "warning": 1, "notice": 2}

DECIMALS = 3


def rounded(value: Any) -> Any:
    """Round every float in a JSON-able structure, so that output bytes do not depend on the
    last bits of a floating-point sum."""
    if isinstance(value, float):
        r = round(value, DECIMALS)
        return 0.0 if r == 0 else r  # no "-0.0"
    if isinstance(value, dict):
        return {str(k): rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v) for v in value]
    return value


class _Model(Fields):
    """Plain records on topology.models.Fields, not dataclasses: `convert` and `diagnose` import this module."""

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON data, floats rounded."""
        return rounded(_jsonable(self))


def _jsonable(value: Any) -> Any:
    """Records as dicts of their fields, tuples and sets as lists: what JSON has (a copy that shares no
    container with the record, as dataclasses.asdict made)."""
    if hasattr(type(value), "__dataclass_fields__"):  # a record of a module that `convert` does not import
        from dataclasses import fields
        return {f.name: _jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Fields):
        return {name: _jsonable(getattr(value, name)) for name in value._FIELDS}
    if isinstance(value, dict):
        return {copy_value(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    return copy_value(value)


class Evidence(_Model):
    """One fact a finding rests on: a metric of an entity, a relation, or an aggregate."""

    _FIELDS = ("kind", "ids", "metric", "value", "threshold", "unit", "note")

    def __init__(self, kind: Literal["entity", "edge", "statistic"], ids: list[str] | None = None,
                 metric: str | None = None, value: Any = None, threshold: Any = None, unit: str | None = None,
                 note: str | None = None) -> None:
        self.kind = kind
        self.ids = [] if ids is None else ids  # entity ids (entity, statistic) or edge ids (edge)
        self.metric = metric
        self.value = value
        self.threshold = threshold
        self.unit = unit
        self.note = note


class Finding(_Model):
    _FIELDS = ("pattern", "layer", "layer_name", "severity", "priority", "title", "description", "evidence",
               "recommendations", "subjects", "related")

    def __init__(self, pattern: str, layer: int, layer_name: str, severity: Severity,
                 priority: Literal["P0", "P1", "P2"], title: str, description: str,
                 evidence: list[Evidence] | None = None, recommendations: list[str] | None = None,
                 subjects: list[str] | None = None, related: list[str] | None = None) -> None:
        self.pattern = pattern
        self.layer = layer
        self.layer_name = layer_name
        self.severity = severity
        self.priority = priority
        self.title = title
        self.description = description
        self.evidence = [] if evidence is None else evidence
        self.recommendations = [] if recommendations is None else recommendations
        self.subjects = [] if subjects is None else subjects  # ids of the entities the finding is about
        self.related = [] if related is None else related  # ids of patterns that explain or are explained by this one


class CoverageRow(_Model):
    _FIELDS = ("pattern", "layer", "status", "reason")

    def __init__(self, pattern: str, layer: int, status: Literal["finding", "clear", "not_evaluated"],
                 reason: str) -> None:
        self.pattern = pattern
        self.layer = layer
        self.status = status
        self.reason = reason


class Diagnosis(_Model):
    _FIELDS = ("findings", "coverage", "summary")

    def __init__(self, findings: list[Finding] | None = None, coverage: list[CoverageRow] | None = None,
                 summary: dict[str, Any] | None = None) -> None:
        self.findings = [] if findings is None else findings
        self.coverage = [] if coverage is None else coverage
        self.summary = {} if summary is None else summary

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    def finding(self, pattern: str) -> Finding | None:
        return next((f for f in self.findings if f.pattern == pattern), None)

    @staticmethod
    def flow_limit(flow: Any) -> Any:
        """The stage that limits a flow (topology.flow) and why: the judgement the flow view shows."""
        from witty_profiler.diagnosis.flow import limit_of  # flow's rules need the patterns' constants
        return limit_of(flow)

    def status(self, pattern: str) -> str | None:
        return next((c.status for c in self.coverage if c.pattern == pattern), None)

    def counts(self) -> dict[str, int]:
        counts = {"P0": 0, "P1": 0, "P2": 0}
        for f in self.findings:
            counts[f.priority] += 1
        return counts
