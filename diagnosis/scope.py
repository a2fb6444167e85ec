"""The workload in scope and the graph lookups every pattern shares.

Scope, in order: the processes named with ``pids`` and their descendants (``parent_of`` edges);
else the processes that collectors or the legacy reader marked ``ai`` (AI training/inference and
their workers); else nobody, and only host-level patterns are evaluated on the whole host.

Edges are indexed once by (type, source) and (type, target), so each pattern's lookups are dict
reads and the whole catalog stays linear in the size of the graph.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from witty_profiler.topology import Edge, Entity, Graph, cpulist
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.ids import host_of
from witty_profiler.topology.wording import counted

IPC_EDGES = ("pipe", "unix_socket", "tcp", "shm", "msg_queue")
# the relations the patterns follow, from their source and to their target
OUT_TYPES = frozenset(("parent_of", "has_thread", "uses_device", "local_to", "numa_distance", "runs_on", "allocates_on",
                       "in_cgroup", "owns_connection", *IPC_EDGES))
IN_TYPES = frozenset(("parent_of", "uses_device", "in_cgroup", *IPC_EDGES))


def num(entity: Entity | Edge | None, metric: str) -> float | None:
    """A metric as a float, or None when absent or not a number."""
    if entity is None:
        return None
    value = entity.metrics.get(metric)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def parse_cpulist(value: Any) -> set[int] | None:
    """'0-3,8,10-11' or [0, 1, 2] or '0,1' -> a set of CPU numbers; None when unknown."""
    if value is None or value == "":
        return None
    if isinstance(value, (list, tuple, set)):
        try:
            return {int(v) for v in value}
        except (TypeError, ValueError):
            return None
    if isinstance(value, int):
        return {value}
    try:
        return set(cpulist.parse_cpulist(str(value)))
    except ValueError:
        return None


class Scope:
    def __init__(self, graph: Graph, pids: Iterable[int] | None = None) -> None:
        self.graph = graph
        self.meta = graph.meta
        # (type, id) -> edges in id order; only the relations patterns follow (a 300k-edge graph is
        # mostly has_thread/runs_on/allowed_on of threads nobody asks about in the reverse direction)
        self._out: dict[tuple[str, str], list[Edge]] = defaultdict(list)
        self._in: dict[tuple[str, str], list[Edge]] = defaultdict(list)
        for edge in graph.edges():
            if edge.type in OUT_TYPES:
                self._out[edge.type, edge.source].append(edge)
            if edge.type in IN_TYPES:
                self._in[edge.type, edge.target].append(edge)
        self._numa: dict[str, dict[int, Entity]] | None = None
        self._cpu_node: dict[str, dict[int, int]] | None = None
        self.requested_pids = sorted(set(pids)) if pids else []
        self.mode, self.processes = self._resolve(self.requested_pids)
        self.process_ids = {p.id for p in self.processes}
        # set by the matcher: evaluates (once) another pattern, for cross-layer reasoning
        self.resolver: Callable[[str], Any] | None = None

    def verdict(self, pattern_id: str) -> Any:
        """The verdict of another pattern on the same graph and thresholds (memoised by the matcher)."""
        return self.resolver(pattern_id) if self.resolver else None

    # -- scope ---------------------------------------------------------------------------
    def _resolve(self, pids: list[int]) -> tuple[str, list[Entity]]:
        all_processes = self.graph.entities("process")
        if pids:
            by_pid: dict[int, list[Entity]] = defaultdict(list)
            for p in all_processes:
                pid = p.attrs.get("pid")
                if isinstance(pid, int):
                    by_pid[pid].append(p)
            missing = [pid for pid in pids if pid not in by_pid]
            if missing:
                raise InputError(f"pid {', '.join(map(str, missing))} is not in this graph; "
                                 f"list its processes with: witty-profiler query GRAPH --type process")
            chosen: dict[str, Entity] = {}
            frontier = [p for pid in pids for p in by_pid[pid]]
            while frontier:
                proc = frontier.pop()
                if proc.id in chosen:
                    continue
                chosen[proc.id] = proc
                for edge in self.out_edges(proc.id, "parent_of"):
                    child = self.graph.entity(edge.target)
                    if child is not None and child.type == "process":
                        frontier.append(child)
            return "pids", sorted(chosen.values(), key=lambda e: e.id)
        ai = [p for p in all_processes if p.attrs.get("ai") is True]
        if ai:
            return "ai", ai
        return "host", []

    @property
    def has_workload(self) -> bool:
        return bool(self.processes)

    def describe(self) -> str:
        if self.mode == "pids":
            n = len(self.processes)
            return f"pid {', '.join(map(str, self.requested_pids))} and descendants ({counted(n, 'processes')})"
        if self.mode == "ai":
            return f"{len(self.processes)} AI training/inference processes"
        return "the whole host (no --pid given and no AI training/inference process recognised)"

    def in_scope(self, eid: str) -> bool:
        return eid in self.process_ids

    # -- graph lookups -------------------------------------------------------------------
    def out_edges(self, eid: str, kind: str) -> list[Edge]:
        assert kind in OUT_TYPES, f"{kind} edges are not indexed by source: add the type to OUT_TYPES"
        return self._out.get((kind, eid), [])

    def in_edges(self, eid: str, kind: str) -> list[Edge]:
        assert kind in IN_TYPES, f"{kind} edges are not indexed by target: add the type to IN_TYPES"
        return self._in.get((kind, eid), [])

    def entity(self, eid: str) -> Entity | None:
        return self.graph.entity(eid)

    def threads_of(self, process: Entity) -> list[Entity]:
        found = [self.graph.entity(e.target) for e in self.out_edges(process.id, "has_thread")]
        return [t for t in found if t is not None]

    def scope_threads(self) -> list[Entity]:
        return [t for p in self.processes for t in self.threads_of(p)]

    def parent_of(self, process: Entity) -> Entity | None:
        edges = self.in_edges(process.id, "parent_of")
        return self.graph.entity(edges[0].source) if edges else None

    def children_of(self, process: Entity) -> list[Entity]:
        found = [self.graph.entity(e.target) for e in self.out_edges(process.id, "parent_of")]
        return [c for c in found if c is not None]

    def devices_of(self, process: Entity) -> list[tuple[Edge, Entity]]:
        found = []
        for edge in self.out_edges(process.id, "uses_device"):
            device = self.graph.entity(edge.target)
            if device is not None:
                found.append((edge, device))
        return found

    def device_users(self, device: Entity) -> list[Entity]:
        found = [self.graph.entity(e.source) for e in self.in_edges(device.id, "uses_device")]
        return [p for p in found if p is not None]

    def hosts(self) -> list[Entity]:
        return self.graph.entities("host")

    # -- NUMA ----------------------------------------------------------------------------
    @staticmethod
    def node_number(node: Entity) -> int | None:
        """A NUMA node's number: its `node` attribute, else the last part of its id."""
        for candidate in (node.attrs.get("node"), node.id.rsplit(":", 1)[-1]):
            if isinstance(candidate, bool):
                continue
            try:
                return int(candidate)
            except (TypeError, ValueError):
                continue
        return None

    def numa_nodes(self, host: str) -> dict[int, Entity]:
        if self._numa is None:
            self._numa = defaultdict(dict)
            for node in self.graph.entities("numa_node"):
                number = self.node_number(node)
                if number is not None:
                    self._numa[host_of(node.id)][number] = node
        return self._numa.get(host, {})

    def node_of_cpu(self, host: str, cpu: int) -> int | None:
        if self._cpu_node is None:
            self._cpu_node = defaultdict(dict)
            for node in self.graph.entities("numa_node"):
                h = host_of(node.id)
                number = self.node_number(node)
                for c in parse_cpulist(node.attrs.get("cpus")) or ():
                    self._cpu_node[h][c] = number
        return self._cpu_node.get(host, {}).get(cpu)

    def nodes_of_cpus(self, host: str, cpus: Iterable[int]) -> dict[int, list[int]]:
        """node -> the CPUs of `cpus` on it (CPUs whose node is unknown are left out)."""
        found: dict[int, list[int]] = defaultdict(list)
        for cpu in sorted(cpus):
            node = self.node_of_cpu(host, cpu)
            if node is not None:
                found[node].append(cpu)
        return dict(found)

    def numa_distance(self, host: str, a: int, b: int) -> tuple[float | None, str | None]:
        """(distance, id of the evidence: a numa_distance edge or the node entity) or (None, None)."""
        nodes = self.numa_nodes(host)
        na, nb = nodes.get(a), nodes.get(b)
        if na is None or nb is None:
            return None, None
        for edge in self.out_edges(na.id, "numa_distance"):
            if edge.target == nb.id:
                d = edge.attrs.get("distance", edge.metrics.get("distance"))
                if isinstance(d, (int, float)):
                    return float(d), edge.id
        distances = na.attrs.get("distances")
        d = distances.get(str(b), distances.get(b)) if isinstance(distances, dict) else None
        if isinstance(d, (int, float)):
            return float(d), na.id
        return None, None

    def device_node(self, device: Entity) -> tuple[int | None, str | None]:
        """(NUMA node of a device, id of the evidence: the local_to edge or the device)."""
        for edge in self.out_edges(device.id, "local_to"):
            node = self.graph.entity(edge.target)
            if node is not None and node.type == "numa_node":
                number = self.node_number(node)
                if number is not None:
                    return number, edge.id
        number = device.attrs.get("numa_node")
        if isinstance(number, int) and not isinstance(number, bool) and number >= 0:
            return number, device.id
        return None, None

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
