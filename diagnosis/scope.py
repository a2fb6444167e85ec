"""What a pattern sees: the graph's lookups (topology.query), the workload in scope
(topology.workload) and the provenance of the graph, for the reasons a pattern gives when it
cannot judge.

Scope, in order: the processes named with ``pids`` and their descendants (``parent_of`` edges);
else the processes that collectors or the legacy reader marked ``ai`` (AI training/inference and
their workers); else nobody, and only host-level patterns are evaluated on the whole host.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from witty_profiler.topology import Entity, Graph
from witty_profiler.topology.query import GraphQuery, num
from witty_profiler.topology.vocabulary import T
from witty_profiler.topology.workload import Workload, resolve_workload

__all__ = ["Scope", "num"]


class Scope:
    def __init__(self, graph: Graph, pids: Iterable[int] | None = None) -> None:
        self.graph = graph
        self.meta = graph.meta
        self.query = GraphQuery.of(graph)
        self.workload: Workload = resolve_workload(self.query, pids)
        self.mode, self.processes = self.workload.mode, self.workload.processes
        self.requested_pids = self.workload.requested_pids
        self.process_ids = self.workload.ids
        # set by the matcher: evaluates (once) another pattern, for cross-layer reasoning
        self.resolver: Callable[[str], Any] | None = None
        self._digests: list[dict[str, Any]] | None = None

    def digests(self) -> list[dict[str, Any]]:
        """One digest per host (diagnosis.digest), for the cross-host patterns; `cluster diagnose` sets
        them from its hosts' files instead of a graph."""
        if self._digests is None:
            from witty_profiler.diagnosis.digest import host_digests
            self._digests = host_digests(self.graph) if len(self.meta.hosts) > 1 else [{"host": h} for h in
                                                                                       self.meta.hosts]
        return self._digests

    def use_digests(self, digests: list[dict[str, Any]]) -> None:
        self._digests = digests

    def verdict(self, pattern_id: str) -> Any:
        """The verdict of another pattern on the same graph and thresholds (memoised by the matcher)."""
        return self.resolver(pattern_id) if self.resolver else None

    @property
    def has_workload(self) -> bool:
        return bool(self.processes)

    def describe(self) -> str:
        return self.workload.describe()

    def in_scope(self, eid: str) -> bool:
        return eid in self.process_ids

    def scope_threads(self) -> list[Entity]:
        return [t for p in self.processes for t in self.query.threads_of(p)]

    def hosts(self) -> list[Entity]:
        return self.graph.entities(T.HOST)

    # -- provenance ----------------------------------------------------------------------
    @property
    def legacy(self) -> bool:
        return self.meta.source == "legacy"

    @property
    def has_window(self) -> bool:
        return self.meta.duration_s is not None and not self.legacy

    def collector_notes(self, *keywords: str) -> list[str]:
        """'name: status (reason)' for collectors whose name contains a keyword and that were not ok."""
        notes = []
        for name, status in sorted(self.meta.collectors.items()):
            if any(k in name for k in keywords) and status.status != "ok":
                reason = f" ({status.reason})" if status.reason else ""
                notes.append(f"collector {name}: {status.status}{reason}")
        return notes

    def missing(self, what: str, *keywords: str) -> str:
        """The reason a pattern could not be evaluated: what is missing, and why where known."""
        notes = self.collector_notes(*keywords) if keywords else []
        if self.legacy:
            notes = notes or ["the legacy witty-profiler format does not record it (no capture window, no rates)"]
            notes[0] = "legacy file: " + notes[0]
        elif not notes and keywords and not any(any(k in n for k in keywords) for n in self.meta.collectors):
            notes.append(f"no {'/'.join(keywords)} collector ran")
        return what + (f" ({'; '.join(notes)})" if notes else "")
