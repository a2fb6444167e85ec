"""Before/after comparison: did the optimisation resolve the findings, and what moved?

Both graphs are diagnosed with the same thresholds and scope. A finding is matched by pattern id:
`resolved` (before only), `new` (after only) or `persisting` (both, with the priority of each).
Matching by pattern survives a restart that changes every pid; a persisting finding also says
which of its subjects (processes, devices...) were resolved, are new or persist, so that a fix
that moved the problem from one process to another is not read as "nothing changed".
Metric deltas pair the evidence items of the two findings by (kind, ids, metric); for a resolved
finding, each entity or edge metric it cited is looked up again in the after graph.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from witty_profiler.diagnosis.catalog import with_unit
from witty_profiler.diagnosis.matcher import diagnose
from witty_profiler.diagnosis.models import Diagnosis, Evidence, Finding, _Model, rounded
from witty_profiler.topology import Graph


@dataclass
class Delta(_Model):
    ids: list[str]
    metric: str
    before: float | None = None
    after: float | None = None
    delta: float | None = None
    unit: str | None = None


@dataclass
class Change(_Model):
    pattern: str
    title: str
    layer: int
    before: str | None = None  # priority before, or None
    after: str | None = None  # priority after, or None
    deltas: list[Delta] = field(default_factory=list)
    subjects_resolved: list[str] = field(default_factory=list)  # subjects of the finding before only
    subjects_new: list[str] = field(default_factory=list)  # subjects of the finding after only
    subjects_persisting: list[str] = field(default_factory=list)  # subjects of both findings


@dataclass
class Comparison(_Model):
    resolved: list[Change] = field(default_factory=list)
    new: list[Change] = field(default_factory=list)
    persisting: list[Change] = field(default_factory=list)
    before_counts: dict[str, int] = field(default_factory=dict)
    after_counts: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    def markdown(self) -> str:
        b, a = self.before_counts, self.after_counts
        lines = ["# witty-profiler comparison", "",
                 f"Before: P0 {b.get('P0', 0)} · P1 {b.get('P1', 0)} · P2 {b.get('P2', 0)}  →  "
                 f"after: P0 {a.get('P0', 0)} · P1 {a.get('P1', 0)} · P2 {a.get('P2', 0)}", ""]
        for title, changes in (("Resolved", self.resolved), ("New", self.new), ("Persisting", self.persisting)):
            lines += [f"## {title} ({len(changes)})", ""]
            if not changes:
                lines += ["None.", ""]
                continue
            for c in changes:
                lines.append(f"### `{c.pattern}` — {c.title}: {c.before or '-'} → {c.after or '-'}")
                lines.append("")
                if c.before and c.after and (c.subjects_resolved or c.subjects_new):
                    lines += [f"Subjects: {_ids('resolved', c.subjects_resolved)} · {_ids('new', c.subjects_new)} · "
                              f"{_ids('persisting', c.subjects_persisting)}", ""]
                if c.deltas:
                    lines += ["| ids | metric | before | after | delta |", "|---|---|---|---|---|"]
                    for d in c.deltas:
                        before = _v(d.before) if d.before is None else with_unit(_v(d.before), d.unit)
                        after = _v(d.after) if d.after is None else with_unit(_v(d.after), d.unit)
                        lines.append(f"| {', '.join(d.ids[:3])}{' (+%d)' % (len(d.ids) - 3) if len(d.ids) > 3 else ''}"
                                     f" | {d.metric} | {before} | {after} | {_signed(d.delta)} |")
                    lines.append("")
        return "\n".join(lines).rstrip() + "\n"


def _ids(label: str, ids: list[str], shown: int = 4) -> str:
    more = f" (+{len(ids) - shown})" if len(ids) > shown else ""
    return f"{label} {len(ids)}" + (f": {', '.join(ids[:shown])}{more}" if ids else "")


def _v(value: float | None) -> str:
    return "" if value is None else f"{rounded(value):g}"


def _signed(value: float | None) -> str:
    return "" if value is None else f"{rounded(value):+g}"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _key(e: Evidence) -> tuple[str, tuple[str, ...], str]:
    return e.kind, tuple(e.ids), e.metric or ""


def _deltas(before: Finding | None, after: Finding | None, after_graph: Graph) -> list[Delta]:
    found: list[Delta] = []
    after_items = {_key(e): e for e in (after.evidence if after else [])}
    for e in before.evidence if before else []:
        b = _number(e.value)
        if b is None or not e.metric:
            continue
        twin = after_items.get(_key(e))
        a = _number(twin.value) if twin is not None else _lookup(after_graph, e)
        found.append(Delta(ids=e.ids, metric=e.metric, before=b, after=a, delta=None if a is None else a - b,
                           unit=e.unit))
    if before is None and after is not None:
        for e in after.evidence:
            a = _number(e.value)
            if a is not None and e.metric:
                found.append(Delta(ids=e.ids, metric=e.metric, after=a, unit=e.unit))
    unique = {(tuple(d.ids), d.metric): d for d in found}
    return [unique[k] for k in sorted(unique)]


def _lookup(graph: Graph, e: Evidence) -> float | None:
    """The same metric of the same entity or edge in another graph, if it is there."""
    if len(e.ids) != 1 or not e.metric:
        return None
    item = graph.entity(e.ids[0]) if e.kind == "entity" else graph.edge(e.ids[0]) if e.kind == "edge" else None
    return _number(item.metrics.get(e.metric)) if item is not None else None


def compare_diagnoses(before: Diagnosis, after: Diagnosis, after_graph: Graph) -> Comparison:
    b = {f.pattern: f for f in before.findings}
    a = {f.pattern: f for f in after.findings}
    result = Comparison(before_counts=before.counts(), after_counts=after.counts())
    for pattern in sorted(set(b) | set(a)):
        fb, fa = b.get(pattern), a.get(pattern)
        ref = fb or fa
        assert ref is not None
        before_subjects, after_subjects = set(fb.subjects if fb else ()), set(fa.subjects if fa else ())
        change = Change(pattern=pattern, title=ref.title, layer=ref.layer, before=fb.priority if fb else None,
                        after=fa.priority if fa else None, deltas=_deltas(fb, fa, after_graph),
                        subjects_resolved=sorted(before_subjects - after_subjects),
                        subjects_new=sorted(after_subjects - before_subjects),
                        subjects_persisting=sorted(before_subjects & after_subjects))
        (result.persisting if fb and fa else result.resolved if fb else result.new).append(change)
    return result


def compare(before: Graph, after: Graph, thresholds: Any = None, pids: Iterable[int] | None = None) -> Comparison:
    return compare_diagnoses(diagnose(before, pids=pids, thresholds=thresholds),
                             diagnose(after, pids=pids, thresholds=thresholds), after)
