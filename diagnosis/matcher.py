"""The matcher: every pattern of the catalog (or of one layer) against one graph.

Each pattern ends as a finding or as a coverage row `clear` / `not_evaluated` with its reason.
Patterns may ask for another pattern's verdict (cross-layer reasoning: an idle accelerator
whose process waits for busy loaders points to the data-plane finding); verdicts are computed
once and shared. Findings are ordered by priority, then layer, then id, so the output depends
only on the graph and the thresholds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from witty_profiler.diagnosis.catalog import Verdict, catalog, not_evaluated
from witty_profiler.diagnosis.models import (
    LAYER_NAMES,
    LAYER_NUMBERS,
    LAYER_TITLES,
    PRIORITY,
    SEVERITY_RANK,
    CoverageRow,
    Diagnosis,
    Finding,
)
from witty_profiler.diagnosis.scope import Scope
from witty_profiler.diagnosis.thresholds import Overrides, coerce, effective
from witty_profiler.topology import Graph
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.gcpause import gc_paused


def layer_number(layer: str | int | None) -> int | None:
    """'memory', 'Memory', '2' or 2 -> 2; None -> None; anything else is an InputError."""
    if layer is None or layer == "" or layer == "all":
        return None
    if isinstance(layer, int) or (isinstance(layer, str) and layer.isdigit()):
        number = int(layer)
        if number in LAYER_NAMES:
            return number
    elif isinstance(layer, str):
        key = layer.strip().lower().replace(" ", "").replace("_", "").replace("-", "")
        aliases = {name: n for name, n in LAYER_NUMBERS.items()}
        aliases.update({"controlplane": 6, "data": 7})
        if key in aliases:
            return aliases[key]
    names = ", ".join(LAYER_NUMBERS)
    raise InputError(f"unknown layer {layer!r}; use one of: {names} (or 1-7)")


class _Evaluator:
    def __init__(self, scope: Scope, overrides: Overrides | None) -> None:
        self.scope = scope
        self.overrides = overrides
        self.verdicts: dict[str, Verdict] = {}
        self._running: set[str] = set()
        scope.resolver = self.verdict

    def verdict(self, pattern_id: str) -> Verdict | None:
        if pattern_id in self.verdicts:
            return self.verdicts[pattern_id]
        if pattern_id in self._running:
            return None  # a cycle: the asking pattern decides without it
        pattern = catalog()[pattern_id]
        self._running.add(pattern_id)
        try:
            result = pattern.check(self.scope, effective(pattern, self.overrides))
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - one broken pattern must not hide the other 32
            result = not_evaluated(f"internal error while evaluating this pattern ({type(exc).__name__}: {exc}); "
                                   "please report it with the graph file")
        finally:
            self._running.discard(pattern_id)
        self.verdicts[pattern_id] = result
        return result


def _first_sentence(text: str, limit: int = 240) -> str:
    """The first sentence; a long one is cut after its last clause that fits ("...; ...")."""
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    sentence = match.group(1) if match else text
    if len(sentence) > limit and "; " in sentence[:limit]:
        sentence = sentence[:sentence.rindex("; ", 0, limit)] + "; ..."
    return sentence


def diagnose(graph: Graph, pids: Iterable[int] | None = None, layer: str | int | None = None,
             thresholds: Any = None) -> Diagnosis:
    """Evaluate the catalog on a graph. `pids` narrows the workload to those processes and their
    descendants; `layer` (name or number) limits the output to one layer; `thresholds` is a TOML
    path or a mapping of overrides (see diagnosis.thresholds)."""
    overrides = coerce(thresholds)
    only = layer_number(layer)
    # indexing 100k+ edges makes hundreds of thousands of small lists and no cycles
    with gc_paused():
        return _diagnose(graph, pids, only, overrides)


def _related_both_ways(verdicts: dict[str, Verdict]) -> dict[str, list[str]]:
    """pattern id -> its related patterns, with the patterns that name it as related added: a
    finding that explains another is named by it, and names it."""
    related = {pid: set(v.related) for pid, v in verdicts.items() if v.status == "finding"}
    for pid, v in verdicts.items():
        if v.status != "finding":
            continue
        for other in v.related:
            if other in related:
                related[other].add(pid)
    return {pid: sorted(ids) for pid, ids in related.items()}


def diagnose_hosts(digests: list[dict[str, Any]], thresholds: Any = None) -> Diagnosis:
    """The cross-host patterns alone, on host digests (diagnosis.digest) instead of a graph: what
    `cluster diagnose` adds to its hosts' own diagnoses."""
    from witty_profiler.topology.models import Meta
    scope = Scope(Graph(Meta(hosts=[d["host"] for d in digests])))
    scope.use_digests(digests)
    with gc_paused():
        return _evaluate(scope, None, coerce(thresholds), cross_host_only=True)


def _diagnose(graph: Graph, pids: Iterable[int] | None, only: int | None, overrides: Overrides | None) -> Diagnosis:
    return _evaluate(Scope(graph, [int(p) for p in pids] if pids else None), only, overrides)


def _evaluate(scope: Scope, only: int | None, overrides: Overrides | None, cross_host_only: bool = False) -> Diagnosis:
    graph = scope.graph
    evaluator = _Evaluator(scope, overrides)
    findings: list[Finding] = []
    coverage: list[CoverageRow] = []
    patterns = [p for p in catalog().values() if p.cross_host or not cross_host_only]
    # every pattern, even for one layer: a finding of this layer may explain one of another layer,
    # which names it (patterns ask only the verdicts they need, so the other way round is not known
    # before all are in; the whole catalog costs milliseconds once the graph is indexed)
    for pattern in patterns:
        evaluator.verdict(pattern.id)
    related = _related_both_ways(evaluator.verdicts)
    for pattern in patterns:
        if only is not None and pattern.layer != only:
            continue
        v = evaluator.verdict(pattern.id)
        assert v is not None
        if v.status == "finding":
            severity = v.severity or "warning"
            findings.append(Finding(
                pattern=pattern.id, layer=pattern.layer, layer_name=pattern.layer_name, severity=severity,
                priority=PRIORITY[severity], title=pattern.title, description=v.description, evidence=v.evidence,
                recommendations=list(v.recommendations or pattern.recommendations), subjects=v.subjects,
                related=related.get(pattern.id, v.related)))
            reason = f"{PRIORITY[severity]} ({severity}): {_first_sentence(v.description)}"
        else:
            reason = v.reason
        coverage.append(CoverageRow(pattern=pattern.id, layer=pattern.layer, status=v.status, reason=reason))
    findings.sort(key=lambda f: (SEVERITY_RANK[f.severity], f.layer, f.pattern))
    diagnosis = Diagnosis(findings=findings, coverage=coverage)
    diagnosis.summary = _summary(diagnosis, graph, scope, only, overrides)
    return diagnosis


def _summary(d: Diagnosis, graph: Graph, scope: Scope, only: int | None, overrides: Overrides | None) -> dict[str, Any]:
    statuses = {"finding": 0, "clear": 0, "not_evaluated": 0}
    for row in d.coverage:
        statuses[row.status] += 1
    meta = graph.meta
    return {
        "counts": d.counts(),
        "patterns": len(d.coverage),
        **statuses,
        "top": [f"{f.priority} {f.pattern}: {_first_sentence(f.description)}" for f in d.findings[:3]],
        "scope": {"mode": scope.mode, "description": scope.describe(), "pids": scope.requested_pids,
                  "processes": len(scope.processes)},
        "layer": LAYER_TITLES[only] if only else None,
        "hosts": list(meta.hosts),
        "source": meta.source,
        "started_at": meta.started_at,
        "duration_s": meta.duration_s,
        "thresholds_overridden": sorted(overrides or {}),
        "collectors": {name: {"status": c.status, **({"reason": c.reason} if c.reason else {})}
                       for name, c in sorted(meta.collectors.items())},
        # a window read from Prometheus: what each host's own exporter reported, passed on as recorded, never
        # judged again (the patterns above judge the window itself)
        **({"exporter_findings": meta.extra["exporter_findings"]} if meta.extra.get("exporter_findings") else {}),
    }
