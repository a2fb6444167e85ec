"""Where a process runs, may run and keeps its memory, per NUMA node.

Read from the graph in order of precision: measured run time per node (``runs_on`` edges of the
process, else of its threads, else the threads' ``numa_runtime_ns``), pages per node
(``allocates_on`` edges, else the process's ``numa_pages``), and the nodes it may run on (the
CPUs of ``cpus_allowed`` of the process and its threads, mapped through the NUMA nodes' CPU lists,
else its and its threads' ``allowed_on`` edges). The interconnect and memory patterns judge it and
the views show it: both get it from `GraphQuery.placement`.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import repeat
from operator import attrgetter

from witty_profiler.topology.cpulist import cpu_set
from witty_profiler.topology.ids import host_of
from witty_profiler.topology.models import Entity, Fields
from witty_profiler.topology.query import GraphQuery, num
from witty_profiler.topology.vocabulary import E, M


class Placement(Fields):  # not a dataclass: `convert` imports this module
    _FIELDS = ("runtime", "runtime_ids", "pages", "pages_ids", "allowed_cpus", "allowed_nodes")

    def __init__(self, runtime: dict[int, float] | None = None, runtime_ids: list[str] | None = None,
                 pages: dict[int, float] | None = None, pages_ids: list[str] | None = None,
                 allowed_cpus: set[int] | None = None, allowed_nodes: list[int] | None = None) -> None:
        self.runtime = {} if runtime is None else runtime  # node -> run time (ns, or share in %)
        self.runtime_ids = [] if runtime_ids is None else runtime_ids  # the edges or entities it came from
        self.pages = {} if pages is None else pages  # node -> pages
        self.pages_ids = [] if pages_ids is None else pages_ids
        self.allowed_cpus = set() if allowed_cpus is None else allowed_cpus
        self.allowed_nodes = [] if allowed_nodes is None else allowed_nodes

    @staticmethod
    def share(values: dict[int, float], node: int) -> float | None:
        total = sum(values.values())
        return None if total <= 0 else values.get(node, 0.0) * 100 / total

    def remote_share(self, values: dict[int, float], node: int) -> float | None:
        local = self.share(values, node)
        return None if local is None else 100.0 - local

    def pages_on(self, nodes: set[int] | list[int]) -> float | None:
        """Share of the pages (%) on any of `nodes`; None when the pages are not known."""
        total = sum(self.pages.values())
        return None if total <= 0 or not nodes else sum(v for n, v in self.pages.items() if n in nodes) * 100 / total

    @staticmethod
    def main_node(values: dict[int, float]) -> int | None:
        if not values or sum(values.values()) <= 0:
            return None
        return max(values, key=lambda n: (values[n], -n))


def per_node(values: object) -> dict[int, float]:
    """{'6': 1234, 7: 5.0} -> {6: 1234.0, 7: 5.0}, skipping keys or values that are not numbers."""
    found: dict[int, float] = {}
    if not isinstance(values, dict):
        return found
    for node, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        try:
            found[int(node)] = found.get(int(node), 0.0) + float(value)
        except (TypeError, ValueError):
            continue
    return found


def _runs_on(q: GraphQuery, entity: Entity, edges: list | None = None) -> tuple[dict[int, float], list[str]]:
    if edges is None:
        edges = q.out_edges(entity.id, E.RUNS_ON)
    if not edges:  # most threads of a process without runs_on edges, and every process with them
        return {}, []
    values: dict[int, float] = {}
    ids = []
    node_of, ns, share = q.node_of, M.RUNTIME_NS_TOTAL, M.RUNTIME_SHARE_PCT
    for edge in edges:
        node = node_of(edge.target)
        metrics = edge.metrics
        value = metrics.get(ns)
        if type(value) is not float:  # num's own checks, for a value that is not a float
            value = None if value is None else num(edge, ns)
            if value is None:
                value = metrics.get(share)
                if value is not None and type(value) is not float:
                    value = num(edge, share)
        if node is not None and value is not None:
            values[node] = values.get(node, 0.0) + value
            ids.append(edge.id)
    return values, ids


def placement_of(q: GraphQuery, process: Entity) -> Placement:
    p = Placement()
    threads = q.threads_of(process)
    # Run time: measured nanoseconds of the process first, else its threads' (legacy files keep run
    # time per thread only), else a process-level share.
    runtime: dict[int, float] = defaultdict(float)
    values, ids = _runs_on(q, process)
    if values and all(num(q.graph.edge(i), M.RUNTIME_NS_TOTAL) is not None for i in ids):
        runtime.update(values)
        p.runtime_ids.extend(ids)
    else:
        out_edges = q.out_edges
        for thread, edges in zip(threads, map(out_edges, map(_ID, threads), repeat(E.RUNS_ON))):
            t_values, t_ids = _runs_on(q, thread, edges) if edges else _NONE
            if t_values:
                for node, v in t_values.items():
                    runtime[node] += v
                p.runtime_ids.extend(t_ids)
            elif per_node(thread.attrs.get("numa_runtime_ns")):
                for node, v in per_node(thread.attrs["numa_runtime_ns"]).items():
                    runtime[node] += v
                p.runtime_ids.append(thread.id)
    if not runtime and values:
        runtime.update(values)
        p.runtime_ids.extend(ids)
    p.runtime = dict(runtime)
    # Pages.
    for edge in q.out_edges(process.id, E.ALLOCATES_ON):
        node, pages = q.node_of(edge.target), num(edge, M.PAGES)
        if node is not None and pages is not None:
            p.pages[node] = p.pages.get(node, 0.0) + pages
            p.pages_ids.append(edge.id)
    if not p.pages:
        p.pages = per_node(process.attrs.get("numa_pages"))
        if p.pages:
            p.pages_ids.append(process.id)
    # Allowed CPUs: the process's mask, widened by any thread's own mask; without masks, the nodes
    # the allowed_on edges name.
    masks = set()  # the threads of a process mostly share one mask string: each read once
    for entity in [process, *threads]:
        mask = entity.attrs.get("cpus_allowed")
        if type(mask) is str:
            if mask in masks:
                continue
            masks.add(mask)
        p.allowed_cpus |= cpu_set(mask)
    p.allowed_nodes = list(q.nodes_of_cpus(host_of(process.id), p.allowed_cpus))
    if not p.allowed_cpus:
        nodes = {q.node_of(e.target) for entity in [process, *threads] for e in q.out_edges(entity.id, E.ALLOWED_ON)}
        p.allowed_nodes = sorted(n for n in nodes if n is not None)
    return p


_ID, _NONE = attrgetter("id"), ({}, [])


def expected_remote_pct(p: Placement) -> float | None:
    """Share of memory accesses expected to be remote if each thread touches all pages evenly:
    sum over run nodes of (run share x share of pages elsewhere)."""
    run_total, page_total = sum(p.runtime.values()), sum(p.pages.values())
    if run_total <= 0 or page_total <= 0:
        return None
    # multiply before dividing: 30 % stays 30.0, not 30.000000000000004
    return sum(run * (page_total - p.pages.get(node, 0.0)) * 100 / (run_total * page_total)
               for node, run in p.runtime.items())
