"""What the views of one graph share: the graph's lookups, the workload, the diagnosis findings they
show, and how a view names the requests that list what it left out.

The facts come from topology.query and topology.workload, the layer the diagnosis reads too, so a
row shows what the finding that cites it computed. The diagnosis is given by the caller
(`witty_profiler.convert` makes it with the same pids and thresholds as `diagnose`): the converters
never judge anything themselves. The workload is the diagnosis' own: the pids it was asked about
and their descendants, else the AI processes.
"""

from __future__ import annotations

from collections import defaultdict
from functools import cached_property
from typing import Any

from witty_profiler.converters.evidence import evidence_value, item_owner
from witty_profiler.converters.hints import CliHints, Hints
from witty_profiler.converters.layers import LAYER_NUMBERS
from witty_profiler.topology import Entity, Graph
from witty_profiler.topology.ids import host_of
from witty_profiler.topology.query import GraphQuery, node_number
from witty_profiler.topology.vocabulary import M, T
from witty_profiler.topology.workload import Workload, resolve_workload, workload_members

_ROLE_ORDER = {"trainer": 0, "inference": 0, "launcher": 2, "loader": 1}


class GraphContext:
    def __init__(self, graph: Graph, hints: Hints = CliHints(), diagnosis: Any = None) -> None:
        self.graph = graph
        self.query = GraphQuery.of(graph)
        self.hints = hints  # how the view says to get what it left out (shell commands or MCP tool calls)
        self._diagnosis = diagnosis
        self._values: dict[str, dict[tuple[str, str], str]] = {}
        self.blocks: dict[str, list[Any]] = {}  # the blocks of each view, built once (converters.views.blocks)

    # -- workload -------------------------------------------------------------------------
    @cached_property
    def scope(self) -> Workload:
        """The workload of the diagnosis: the pids it was made for and their descendants, else the
        AI processes."""
        scope = getattr(self._diagnosis, "summary", {}).get("scope") or {}
        return resolve_workload(self.query, scope.get("pids") or None)

    @cached_property
    def workload(self) -> list[Entity]:
        """The workload's processes: main roles first, then by CPU, then by pid."""
        return sorted(self.scope.processes, key=lambda p: (_ROLE_ORDER.get(p.attrs.get("role"), 3), -cpu_of(p),
                                                           p.attrs.get("pid") or 0, p.id))

    @property
    def workload_ids(self) -> frozenset[str]:
        return self.scope.ids

    @cached_property
    def workload_members(self) -> frozenset[str]:
        """The workload's processes and their threads, computed once: ranking 100k threads asks this
        100k times."""
        return workload_members(self.query, self.scope)

    def in_workload(self, entity: Entity) -> bool:
        """A process of the workload, or a thread of one."""
        return entity.id in self.workload_members

    # -- what the tables list ---------------------------------------------------------------
    @cached_property
    def counts_by_type(self) -> tuple[dict[str, int], dict[str, int]]:
        return self.graph.counts_by_type()

    @cached_property
    def hosts(self) -> list[Entity]:
        return self.graph.entities(T.HOST)

    @cached_property
    def numa_nodes(self) -> list[Entity]:
        """Every NUMA node, by host and number."""
        return sorted(self.graph.entities(T.NUMA_NODE),
                      key=lambda n: (host_of(n.id), node_number(n) if node_number(n) is not None else -1))

    def devices(self, process: Entity) -> list[Entity]:
        """The devices a process uses."""
        return [device for _, device in self.query.devices_of(process)]

    # -- diagnosis ------------------------------------------------------------------------
    @property
    def diagnosis(self) -> tuple[Any, str | None]:
        """(Diagnosis or None, why not)."""
        if self._diagnosis is None:
            return None, "no diagnosis was given to the view"
        return self._diagnosis, None

    def findings(self, layer: str | None = None) -> list[Any]:
        if self._diagnosis is None:
            return []
        return [f for f in self._diagnosis.findings if layer is None or f.layer == LAYER_NUMBERS.get(layer)]

    def cited(self, layer: str) -> set[str]:
        """Entity and edge ids that the findings of a layer cite, with the two ends of every
        cited edge (the rows that show an edge are its source's and its target's) and the entity
        a value over edges belongs to (the process of the threads whose run time it adds up)."""
        raw = {i for f in self.findings(layer) for ev in f.evidence for i in (ev.ids or [])}
        ends = set()
        for i in raw:
            if "|" in i:
                edge = self.graph.edge(i)
                if edge is not None:
                    ends.update((edge.source, edge.target))
                else:
                    kind, *rest = i.split("|")
                    ends.update(rest[:2])
        return raw | ends | {owner for owner, _ in self.cited_values(layer)}

    def cited_values(self, layer: str) -> dict[tuple[str, str], str]:
        """(entity id, metric) -> the value the findings of a layer cite of it, as the findings
        block writes it: for a table column that shows what a finding computed on the row of the
        entity it belongs to."""
        if layer not in self._values:
            out: dict[tuple[str, str], str] = {}
            for f in self.findings(layer):
                for ev in f.evidence:
                    owner = item_owner(ev.ids or [])
                    if owner is not None and ev.metric and ev.kind != "edge":
                        text, key = evidence_value(ev.value, ev.unit), (owner, ev.metric)
                        out[key] = text if out.get(key, text) == text else f"{out[key]}; {text}"
            self._values[layer] = out
        return self._values[layer]

    def cited_by_entity(self, layer: str) -> dict[str, list[str]]:
        """entity id -> 'metric value' of every entity-level value the findings of a layer cite of it."""
        values: dict[str, list[str]] = defaultdict(list)
        for f in self.findings(layer):
            for ev in f.evidence:
                if ev.kind != "edge" and ev.metric and ev.value is not None:
                    for i in ev.ids or []:
                        values[i].append(f"{ev.metric} {evidence_value(ev.value, ev.unit)}")
        return values


def cpu_of(entity: Entity) -> float:
    v = entity.metrics.get(M.CPU_UTIL_PCT)
    return float(v) if isinstance(v, (int, float)) else -1.0


def context_for(graph: Graph, hints: Hints = CliHints(), diagnosis: Any = None) -> GraphContext:
    """The context of a graph for a hint style and a diagnosis: the last one made is kept (in the
    graph, until it changes), so the views of one request share their work."""
    kept = graph.derived(GraphContext.__name__, dict)
    ctx = kept.get(hints)
    if ctx is None or ctx._diagnosis is not diagnosis:
        ctx = kept[hints] = GraphContext(graph, hints, diagnosis)
    return ctx
