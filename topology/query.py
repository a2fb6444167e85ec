"""The questions every reader of a graph asks, answered once per graph and the same way for all.

The diagnosis (a finding's evidence) and the converters (the table rows that show it) read the
graph's relations through this one layer, so that a table never shows a different fact from the
finding that cites it: which NUMA node a device is local to, which node a CPU belongs to, where a
process runs and keeps its pages (topology.placement), which processes form the workload
(topology.workload).

Edges are indexed by type, then by source or target, on first use of a type: a lookup is a dict
read, and the threads' has_thread/runs_on/allowed_on edges of a 300k-edge graph are only indexed
when someone asks about them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any

from witty_profiler.topology.cpulist import cpu_set
from witty_profiler.topology.graph import Graph
from witty_profiler.topology.ids import host_of, process_of_thread
from witty_profiler.topology.models import Edge, Entity
from witty_profiler.topology.vocabulary import E, M, T

if TYPE_CHECKING:
    from witty_profiler.topology.placement import Placement


def num(item: Entity | Edge | None, metric: str) -> float | None:
    """A metric as a float, or None when absent or not a number."""
    if item is None:
        return None
    value = item.metrics.get(metric)
    if type(value) is float:  # the common case in one test (asked for every edge of 100,000 threads)
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def runnable_pct(e: Entity) -> float | None:
    """Share of the window a task wanted a CPU: running (cpu_util_pct) plus waiting in the run
    queue. A CPU-bound task on a contended host runs little but is runnable all the time."""
    cpu = num(e, M.CPU_UTIL_PCT)
    if cpu is None:
        return None
    return cpu + (num(e, M.RUNQUEUE_WAIT_MS_PER_S) or 0.0) / 10.0


def node_number(node: Entity) -> int | None:
    """A NUMA node's number: its `node` attribute, else the last part of its id."""
    return _number(node, "node")


def cpu_number(cpu: Entity) -> int | None:
    """A CPU's number: its `cpu` attribute, else the last part of its id."""
    return _number(cpu, "cpu")


def _number(entity: Entity, attr: str) -> int | None:
    for candidate in (entity.attrs.get(attr), entity.id.rsplit(":", 1)[-1]):
        if isinstance(candidate, bool):
            continue
        try:
            return int(candidate)
        except (TypeError, ValueError):
            continue
    return None


class GraphQuery:
    """Lookups over one graph. Get it with `GraphQuery.of(graph)`: one per graph, rebuilt when the
    graph changes, shared by the diagnosis and every view of that graph."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._out: dict[str, dict[str, list[Edge]]] = {}  # edge type -> source id -> edges, id order
        self._in: dict[str, dict[str, list[Edge]]] = {}
        self._numa: dict[str, dict[int, Entity]] | None = None  # host -> node number -> node
        self._cpu_node: dict[str, dict[int, int]] | None = None  # host -> cpu -> node number
        self._placements: dict[str, Placement] = {}
        self._node_of: dict[str, int | None] = {}
        self._threads: dict[str, list[Entity]] = {}
        self._process_of: dict[str, str] | None = None

    @classmethod
    def of(cls, graph: Graph) -> "GraphQuery":
        return graph.derived(cls.__name__, lambda: cls(graph))

    # -- edges ----------------------------------------------------------------------------
    def out_edges(self, eid: str, kind: str) -> list[Edge]:
        """Edges of a type leaving an entity, in id order."""
        index = self._out.get(kind)
        if index is None:
            index = self._out[kind] = _group(self.graph.edges(kind), _SOURCE)
        return index.get(eid, [])

    def in_edges(self, eid: str, kind: str) -> list[Edge]:
        """Edges of a type reaching an entity, in id order."""
        index = self._in.get(kind)
        if index is None:
            index = self._in[kind] = _group(self.graph.edges(kind), _TARGET)
        return index.get(eid, [])

    def targets(self, eid: str, kind: str) -> list[Entity]:
        """The entities at the other end of an entity's outgoing edges of a type (those in the graph)."""
        return [e for e in map(self.graph.entity, map(_TARGET, self.out_edges(eid, kind))) if e is not None]

    def sources(self, eid: str, kind: str) -> list[Entity]:
        found = (self.graph.entity(e.source) for e in self.in_edges(eid, kind))
        return [e for e in found if e is not None]

    # -- processes, threads, devices --------------------------------------------------------
    def threads_of(self, process: Entity) -> list[Entity]:
        """A process's threads (a new list each call): found once per process, since the diagnosis and
        the views ask several times for each of thousands of processes."""
        found = self._threads.get(process.id)
        if found is None:
            found = self._threads[process.id] = self.targets(process.id, E.HAS_THREAD)
        return list(found)

    def process_of(self, thread: Entity) -> str:
        """The id of a thread's process: its has_thread edge, else what the thread's id says."""
        if self._process_of is None:  # thread -> the source of its first has_thread edge, at C speed
            self.in_edges("", E.HAS_THREAD)
            index = self._in[E.HAS_THREAD]
            self._process_of = dict(zip(index, map(_SOURCE, map(_FIRST, index.values()))))
        found = self._process_of.get(thread.id)
        return found if found is not None else process_of_thread(thread.id)

    def parent_of(self, process: Entity) -> Entity | None:
        parents = self.sources(process.id, E.PARENT_OF)
        return parents[0] if parents else None

    def children_of(self, process: Entity) -> list[Entity]:
        return self.targets(process.id, E.PARENT_OF)

    def devices_of(self, process: Entity) -> list[tuple[Edge, Entity]]:
        """(uses_device edge, device) of every device a process uses."""
        found = ((e, self.graph.entity(e.target)) for e in self.out_edges(process.id, E.USES_DEVICE))
        return [(e, d) for e, d in found if d is not None]

    def device_users(self, device: Entity) -> list[Entity]:
        return self.sources(device.id, E.USES_DEVICE)

    def accelerators(self) -> list[Entity]:
        """GPUs, then NPUs, each in id order."""
        return self.graph.entities(T.GPU) + self.graph.entities(T.NPU)

    # -- NUMA -----------------------------------------------------------------------------
    def numa_nodes(self, host: str) -> dict[int, Entity]:
        """A host's NUMA nodes by number."""
        if self._numa is None:
            self._numa = defaultdict(dict)
            for node in self.graph.entities(T.NUMA_NODE):
                number = node_number(node)
                if number is not None:
                    self._numa[host_of(node.id)][number] = node
        return self._numa.get(host, {})

    def node_of(self, eid: str) -> int | None:
        """The number of the NUMA node with this id (None for a missing node or another entity), looked up
        once per id (the runs_on edges of 100,000 threads name a few nodes)."""
        if eid not in self._node_of:
            node = self.graph.entity(eid)
            self._node_of[eid] = node_number(node) if node is not None and node.type == T.NUMA_NODE else None
        return self._node_of[eid]

    def _cpu_nodes(self, host: str) -> dict[int, int]:
        """cpu -> node number of a host."""
        if self._cpu_node is None:
            self._cpu_node = defaultdict(dict)
            for node in self.graph.entities(T.NUMA_NODE):
                number = node_number(node)
                for c in cpu_set(node.attrs.get("cpus")) if number is not None else ():
                    self._cpu_node[host_of(node.id)][c] = number
        return self._cpu_node.get(host, {})

    def node_of_cpu(self, host: str, cpu: int) -> int | None:
        return self._cpu_nodes(host).get(cpu)

    def nodes_of_cpus(self, host: str, cpus: Iterable[int]) -> dict[int, list[int]]:
        """node -> the CPUs of `cpus` on it, both in order (CPUs whose node is unknown are left out)."""
        found: dict[int, list[int]] = defaultdict(list)
        table = self._cpu_nodes(host)
        ordered = sorted(cpus)
        for cpu, node in zip(ordered, map(table.get, ordered)):
            if node is not None:
                found[node].append(cpu)
        return dict(sorted(found.items()))

    def numa_distance(self, host: str, a: int, b: int) -> tuple[float | None, str | None]:
        """(distance, id of the evidence: a numa_distance edge or the node entity) or (None, None)."""
        nodes = self.numa_nodes(host)
        na, nb = nodes.get(a), nodes.get(b)
        if na is None or nb is None:
            return None, None
        for edge in self.out_edges(na.id, E.NUMA_DISTANCE):
            if edge.target == nb.id:
                d = edge.attrs.get("distance", edge.metrics.get("distance"))
                if isinstance(d, (int, float)) and not isinstance(d, bool):
                    return float(d), edge.id
        distances = na.attrs.get("distances")
        d = distances.get(str(b), distances.get(b)) if isinstance(distances, dict) else None
        if isinstance(d, (int, float)) and not isinstance(d, bool):
            return float(d), na.id
        return None, None

    def device_node(self, device: Entity) -> tuple[int | None, str | None]:
        """(NUMA node of a device, id of the evidence): its local_to edge, else its numa_node attribute
        (the kernel writes -1 there when it does not know)."""
        for edge in self.out_edges(device.id, E.LOCAL_TO):
            number = self.node_of(edge.target)
            if number is not None:
                return number, edge.id
        number = device.attrs.get("numa_node")
        if isinstance(number, int) and not isinstance(number, bool) and number >= 0:
            return number, device.id
        return None, None

    # -- placement --------------------------------------------------------------------------
    def placement(self, process: Entity) -> Placement:
        """Where a process runs, may run and keeps its pages (topology.placement), computed once."""
        found = self._placements.get(process.id)
        if found is None:
            from witty_profiler.topology.placement import placement_of  # placement builds on this module
            found = self._placements[process.id] = placement_of(self, process)
        return found


def _group(edges: list[Edge], key: Any) -> dict[str, list[Edge]]:
    ends = list(map(key, edges))
    if len(set(ends)) == len(ends):  # an edge to each end (has_thread by thread): its list made at C speed
        return dict(zip(ends, map(list, zip(edges))))
    grouped: dict[str, list[Edge]] = defaultdict(list)
    for edge, at in zip(edges, ends):
        grouped[at].append(edge)
    return dict(grouped)


_SOURCE, _TARGET, _FIRST = attrgetter("source"), attrgetter("target"), itemgetter(0)  # keys without a Python frame per edge
