"""What a diagnosis returns: findings with their evidence, coverage rows, a summary.

These models are the public contract of `witty_profiler.diagnose` and of the JSON report.
Floats are rounded when serialised, and every list is built in a fixed order by the matcher,
so the same graph with the same thresholds always gives the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

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


class _Model:
    def to_dict(self) -> dict[str, Any]:
        """The record as JSON data, floats rounded."""
        return rounded(_jsonable(asdict(self)))


def _jsonable(value: Any) -> Any:
    """Tuples and sets as lists: what JSON has."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    return value


@dataclass
class Evidence(_Model):
    """One fact a finding rests on: a metric of an entity, a relation, or an aggregate."""

    kind: Literal["entity", "edge", "statistic"]
    ids: list[str] = field(default_factory=list)  # entity ids (entity, statistic) or edge ids (edge)
    metric: str | None = None
    value: Any = None
    threshold: Any = None
    unit: str | None = None
    note: str | None = None


@dataclass
class Finding(_Model):
    pattern: str
    layer: int
    layer_name: str
    severity: Severity
    priority: Literal["P0", "P1", "P2"]
    title: str
    description: str
    evidence: list[Evidence] = field(default_factory=list)
    recommendations: list[str] = field(default_factory=list)
    subjects: list[str] = field(default_factory=list)  # ids of the entities the finding is about
    related: list[str] = field(default_factory=list)  # ids of patterns that explain or are explained by this one


@dataclass
class CoverageRow(_Model):
    pattern: str
    layer: int
    status: Literal["finding", "clear", "not_evaluated"]
    reason: str


@dataclass
class Diagnosis(_Model):
    findings: list[Finding] = field(default_factory=list)
    coverage: list[CoverageRow] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

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
