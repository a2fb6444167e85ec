"""Where a process runs, may run and keeps its memory, per NUMA node.

Read from the graph in order of precision: measured run time per node (``runs_on`` edges of the
process, else of its threads, else the threads' ``numa_runtime_ns``), pages per node
(``allocates_on`` edges, else the process's ``numa_pages``), and the nodes of the CPUs it is
allowed on (``cpus_allowed`` of the process and its threads, mapped through the NUMA nodes' CPU
lists). Used by the interconnect patterns.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from witty_profiler.diagnosis.scope import Scope, num, parse_cpulist
from witty_profiler.topology import Entity
from witty_profiler.topology.ids import host_of


@dataclass
class Placement:
    runtime: dict[int, float] = field(default_factory=dict)  # node -> run time (ns, or share in %)
    runtime_ids: list[str] = field(default_factory=list)  # the edges or entities it came from
    pages: dict[int, float] = field(default_factory=dict)
    pages_ids: list[str] = field(default_factory=list)
    allowed_cpus: set[int] = field(default_factory=set)
    allowed_nodes: list[int] = field(default_factory=list)

    def share(self, values: dict[int, float], node: int) -> float | None:
        total = sum(values.values())
        return None if total <= 0 else values.get(node, 0.0) * 100 / total

    def remote_share(self, values: dict[int, float], node: int) -> float | None:
        local = self.share(values, node)
        return None if local is None else 100.0 - local

    def main_node(self, values: dict[int, float]) -> int | None:
        if not values or sum(values.values()) <= 0:
            return None
        return max(values, key=lambda n: (values[n], -n))


def _node_of(scope: Scope, node_id: str) -> int | None:
    node = scope.entity(node_id)
    return None if node is None else scope.node_number(node)


def _per_node(values: object) -> dict[int, float]:
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


def _runs_on(scope: Scope, entity: Entity) -> tuple[dict[int, float], list[str]]:
    values: dict[int, float] = defaultdict(float)
    ids = []
    for edge in scope.out_edges(entity.id, "runs_on"):
        node = _node_of(scope, edge.target)
        value = num(edge, "runtime_ns_total")
        if value is None:
            value = num(edge, "runtime_share_pct")
        if node is not None and value is not None:
            values[node] += value
            ids.append(edge.id)
    return dict(values), ids


def placement_of(scope: Scope, process: Entity) -> Placement:
    p = Placement()
    threads = scope.threads_of(process)
    # Run time: measured nanoseconds of the process first, else its threads' (legacy files keep run
    # time per thread only), else a process-level share.
    runtime: dict[int, float] = defaultdict(float)
    values, ids = _runs_on(scope, process)
    if values and all(num(scope.graph.edge(i), "runtime_ns_total") is not None for i in ids):
        runtime.update(values)
        p.runtime_ids.extend(ids)
    else:
        for thread in threads:
            t_values, t_ids = _runs_on(scope, thread)
            if t_values:
                for node, v in t_values.items():
                    runtime[node] += v
                p.runtime_ids.extend(t_ids)
            elif _per_node(thread.attrs.get("numa_runtime_ns")):
                for node, v in _per_node(thread.attrs["numa_runtime_ns"]).items():
                    runtime[node] += v
                p.runtime_ids.append(thread.id)
    if not runtime and values:
        runtime.update(values)
        p.runtime_ids.extend(ids)
    p.runtime = dict(runtime)
    # Pages.
    for edge in scope.out_edges(process.id, "allocates_on"):
        node, pages = _node_of(scope, edge.target), num(edge, "pages")
        if node is not None and pages is not None:
            p.pages[node] = p.pages.get(node, 0.0) + pages
            p.pages_ids.append(edge.id)
    if not p.pages:
        p.pages = _per_node(process.attrs.get("numa_pages"))
        if p.pages:
            p.pages_ids.append(process.id)
    # Allowed CPUs: the process's mask, widened by any thread's own mask.
    for entity in [process, *threads]:
        cpus = parse_cpulist(entity.attrs.get("cpus_allowed"))
        if cpus:
            p.allowed_cpus |= cpus
    p.allowed_nodes = sorted(scope.nodes_of_cpus(host_of(process.id), p.allowed_cpus))
    return p


def expected_remote_pct(p: Placement) -> float | None:
    """Share of memory accesses expected to be remote if each thread touches all pages evenly:
    sum over run nodes of (run share x share of pages elsewhere)."""
    run_total, page_total = sum(p.runtime.values()), sum(p.pages.values())
    if run_total <= 0 or page_total <= 0:
        return None
    # multiply before dividing: 30 % stays 30.0, not 30.000000000000004
    return sum(run * (page_total - p.pages.get(node, 0.0)) * 100 / (run_total * page_total)
               for node, run in p.runtime.items())
