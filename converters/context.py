"""What the views ask of a graph, computed once per graph: edge indexes, the workload, NUMA
geometry, and the diagnosis findings (when the diagnosis package is there).

Graph.edges(type) sorts every edge on each call; a view asks dozens of such questions, so the
indexes are built here in one pass and shared by all the views of one render (`all` = eight).
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from functools import cached_property
from typing import Any

from witty_profiler.converters.hints import CliHints, Hints
from witty_profiler.topology import Edge, Entity, Graph
from witty_profiler.topology.cpulist import format_cpulist, parse_cpulist
from witty_profiler.topology.ids import host_of, process_of_thread

# the diagnosis' layer numbers (diagnosis.LAYERS) by the name of their view
LAYER_NUMBERS = {"compute": 1, "memory": 2, "interconnect": 3, "network": 4, "storage": 5, "control": 6,
                 "dataplane": 7}
_ROLE_ORDER = {"trainer": 0, "inference": 0, "launcher": 2, "loader": 1}


def cpu_list(value: Any) -> list[int]:
    """'0-3,8,10-11' (or a list of ints) -> [0, 1, 2, 3, 8, 10, 11]; a value the kernel would
    not write reads as no CPUs, so that a malformed attribute never stops a view."""
    if value is None or value == "":
        return []
    if isinstance(value, (list, tuple, set)):
        return sorted(int(v) for v in value)
    try:
        return parse_cpulist(str(value))
    except ValueError:
        return []


def compact_list(values: list[int] | set[int]) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8'; nothing -> '-' (a table cell is never empty)."""
    return format_cpulist(values) or "-"


class GraphContext:
    def __init__(self, graph: Graph, hints: Hints = CliHints(), diagnosis: Any = None) -> None:
        self.graph = graph
        self.hints = hints  # how the view says to get what it left out (shell commands or MCP tool calls)
        self._diagnosis = diagnosis
        self._blocks: dict[str, list[Any]] = {}
        self._values: dict[str, dict[tuple[str, str], str]] = {}
        self.by_type: dict[str, list[Edge]] = defaultdict(list)
        self.out: dict[str, dict[str, list[Edge]]] = defaultdict(lambda: defaultdict(list))
        self.inc: dict[str, dict[str, list[Edge]]] = defaultdict(lambda: defaultdict(list))
        for edge in sorted(graph._edges.values(), key=lambda e: e.id):
            self.by_type[edge.type].append(edge)
            self.out[edge.source][edge.type].append(edge)
            self.inc[edge.target][edge.type].append(edge)

    # -- plain access ---------------------------------------------------------------------
    def entities(self, kind: str) -> list[Entity]:
        return self.graph.entities(kind)

    def entity(self, eid: str) -> Entity | None:
        return self.graph.entity(eid)

    def edges(self, kind: str) -> list[Edge]:
        return self.by_type.get(kind, [])

    def out_edges(self, eid: str, kind: str) -> list[Edge]:
        return self.out.get(eid, {}).get(kind, [])

    def in_edges(self, eid: str, kind: str) -> list[Edge]:
        return self.inc.get(eid, {}).get(kind, [])

    # -- hosts ----------------------------------------------------------------------------
    @cached_property
    def hosts(self) -> list[Entity]:
        return self.entities("host")

    # -- workload -------------------------------------------------------------------------
    @cached_property
    def workload(self) -> list[Entity]:
        """The AI processes (attrs ai=true): main roles first, then by CPU, then by pid."""
        procs = [p for p in self.entities("process") if p.attrs.get("ai")]
        return sorted(procs, key=lambda p: (_ROLE_ORDER.get(p.attrs.get("role"), 3), -cpu_of(p),
                                            p.attrs.get("pid") or 0, p.id))

    @cached_property
    def workload_ids(self) -> set[str]:
        return {p.id for p in self.workload}

    def pid_of(self, entity: Entity) -> int | None:
        pid = entity.attrs.get("pid")
        return pid if isinstance(pid, int) else None

    @cached_property
    def workload_members(self) -> set[str]:
        """The workload's processes and their threads (by has_thread edge or by id), computed once:
        ranking 100k threads asks this 100k times."""
        members = set(self.workload_ids)
        members.update(e.target for pid in self.workload_ids for e in self.out_edges(pid, "has_thread"))
        members.update(t.id for t in self.entities("thread") if process_of_thread(t.id) in self.workload_ids)
        return members

    def in_workload(self, entity: Entity) -> bool:
        """A process of the workload, or a thread of one."""
        return entity.id in self.workload_members

    @cached_property
    def counts_by_type(self) -> tuple[dict[str, int], dict[str, int]]:
        return self.graph.counts_by_type()

    def blocks(self, layer: str) -> list[Any]:
        """The blocks of a layer view, built once per context (ranking 100k threads is not free).
        Cited ids that no table of the view can show get a row of their own, with what the
        findings cite of them, in a table before the others."""
        if layer not in self._blocks:
            from witty_profiler.converters.render import Table, unordered
            from witty_profiler.converters.views import module
            blocks = module(layer).blocks(self)
            cited = self.cited(layer) if layer in LAYER_NUMBERS else set()
            shown: set[str] = set()  # cited ids already shown by a pinned row of an earlier table
            covered: set[str] = set()
            for block in blocks:
                if isinstance(block, Table) and cited:
                    _pin_once(block, cited, shown)
                    for item in unordered(block.items):
                        covered.update(block.covers(item))
            missing = sorted(i for i in cited - covered if "|" not in i)
            if missing:  # first of the tables: cited rows go first
                at = next((k for k, b in enumerate(blocks) if isinstance(b, Table)), len(blocks))
                blocks.insert(at, self._cited_table(layer, missing))
            self._blocks[layer] = blocks
        return self._blocks[layer]

    def _cited_table(self, layer: str, ids: list[str]) -> Any:
        """A row per cited id that no table of the layer shows: its name and the values the findings
        cite of it."""
        from witty_profiler.converters.render import Column, Table
        from witty_profiler.converters.views.common import ID, NAME, evidence_value
        values: dict[str, list[str]] = defaultdict(list)
        for f in self.findings(layer):
            for ev in f.evidence:
                if ev.kind != "edge" and ev.metric and ev.value is not None:
                    for i in ev.ids or []:
                        values[i].append(f"{ev.metric} {evidence_value(ev.value, ev.unit)}")
        rows = [self.entity(i) or Entity(id=i, type=i.split(":", 1)[0]) for i in ids]
        return Table("cited, shown in no table above", [
            ID, NAME,
            Column("cited", lambda e: "; ".join(dict.fromkeys(values.get(e.id, []))), left=True),
        ], rows, "cited entities", self.hints.around(), pinned=len(rows))

    def process_of(self, thread: Entity) -> str:
        edges = self.in_edges(thread.id, "has_thread")
        return edges[0].source if edges else process_of_thread(thread.id)

    # -- NUMA geometry --------------------------------------------------------------------
    @cached_property
    def numa_nodes(self) -> list[Entity]:
        return sorted(self.entities("numa_node"), key=lambda n: (host_of(n.id), _node_no(n)))

    @cached_property
    def cpu_to_node(self) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        for node in self.numa_nodes:
            host = host_of(node.id)
            for cpu in cpu_list(node.attrs.get("cpus")):
                out[(host, cpu)] = _node_no(node)
        return out

    def nodes_of_cpus(self, host: str, cpus: Any) -> list[int]:
        found = {self.cpu_to_node.get((host, c)) for c in cpu_list(cpus)}
        return sorted(n for n in found if n is not None)

    def device_node(self, device: Entity) -> int | None:
        node = device.attrs.get("numa_node")
        if isinstance(node, int) and node >= 0:
            return node
        for edge in self.out_edges(device.id, "local_to"):
            target = self.entity(edge.target)
            if target is not None:
                return _node_no(target)
        return None

    def devices_of(self, process: Entity) -> list[Entity]:
        return [d for e in self.out_edges(process.id, "uses_device") if (d := self.entity(e.target))]

    @cached_property
    def accelerators(self) -> list[Entity]:
        return self.entities("gpu") + self.entities("npu")

    # -- diagnosis ------------------------------------------------------------------------
    @cached_property
    def diagnosis(self) -> tuple[Any, str | None]:
        """(Diagnosis or None, why not). Imported lazily: the converters work without it."""
        if self._diagnosis is not None:
            return self._diagnosis, None
        key = (self.graph.entity_count(), self.graph.edge_count())
        cached = _DIAGNOSES.get(self.graph)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            from witty_profiler.diagnosis import diagnose
        except ImportError:
            return None, "diagnosis not available in this installation"
        try:
            result: tuple[Any, str | None] = (diagnose(self.graph), None)
        except Exception as exc:  # noqa: BLE001 - a view must not die with the diagnosis; it says why
            result = (None, f"diagnosis failed: {type(exc).__name__}: {exc}")
        _DIAGNOSES[self.graph] = (key, result)
        return result

    def findings(self, layer: str | None = None) -> list[Any]:
        diag, _ = self.diagnosis
        if diag is None:
            return []
        return [f for f in diag.findings if layer is None or f.layer == LAYER_NUMBERS.get(layer)]

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
            from witty_profiler.converters.views.common import evidence_value, item_owner
            out: dict[tuple[str, str], str] = {}
            for f in self.findings(layer):
                for ev in f.evidence:
                    owner = item_owner(ev.ids or [])
                    if owner is not None and ev.metric and ev.kind != "edge":
                        text, key = evidence_value(ev.value, ev.unit), (owner, ev.metric)
                        out[key] = text if out.get(key, text) == text else f"{out[key]}; {text}"
            self._values[layer] = out
        return self._values[layer]


def _pin_once(table: Any, cited: set[str], shown: set[str]) -> None:
    """Pin the rows of `table` that show a cited id no earlier table pinned; the rest of the
    cited rows keep their place at the top of the ranking, unpinned."""
    head = list(table.items[: table.pinned])
    keep, free = [], []
    for item in head:
        ids = set(table.covers(item)) & cited
        (keep if ids - shown else free).append(item)
        if ids - shown:
            shown.update(ids)
    if len(keep) != len(head):
        if hasattr(table.items, "first"):  # a Ranked sequence: the cited rows are its `first`
            table.items.first = keep + free + table.items.first[table.pinned:]
        else:
            table.items = keep + free + list(table.items[table.pinned:])
        table.pinned = len(keep)


def _node_no(node: Entity) -> int:
    n = node.attrs.get("node")
    if isinstance(n, int):
        return n
    try:
        return int(node.id.rsplit(":", 1)[1])
    except ValueError:
        return -1


def cpu_of(entity: Entity) -> float:
    v = entity.metrics.get("cpu_util_pct")
    return float(v) if isinstance(v, (int, float)) else -1.0


_DIAGNOSES: "weakref.WeakKeyDictionary[Graph, tuple[tuple[int, int], tuple[Any, str | None]]]" = \
    weakref.WeakKeyDictionary()
_CONTEXTS: "weakref.WeakKeyDictionary[Graph, tuple[tuple[int, int, Hints, int], GraphContext]]" = \
    weakref.WeakKeyDictionary()


def context_for(graph: Graph, hints: Hints = CliHints(), diagnosis: Any = None) -> GraphContext:
    """One context per graph and hint style, rebuilt when the graph has grown."""
    key = (graph.entity_count(), graph.edge_count(), hints, id(diagnosis))
    cached = _CONTEXTS.get(graph)
    if cached is not None and cached[0] == key:
        return cached[1]
    ctx = GraphContext(graph, hints, diagnosis)
    _CONTEXTS[graph] = (key, ctx)
    return ctx
