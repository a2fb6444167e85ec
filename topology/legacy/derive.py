"""What the legacy format leaves implicit, rebuilt once every node and edge has been read.

- the process tree (``parent_of``) from ``ppid``, and each process's AI role, parents first so
  that multiprocessing workers inherit what their parent is;
- NUMA distances as ``numa_distance`` edges, and each ``numa_set``'s members;
- per-process placement from the two per-node vectors: where it ran (``runs_on`` with
  ``runtime_share_pct``), how much of its memory sits where it ran (``cpu_mem_colocation_pct``:
  the sum over nodes of min(CPU share, page share), 100 = all pages on the nodes it ran on, in
  the proportions it ran there) and ``numa_remote_pages_pct``;
- which NUMA nodes each task may run on (``allowed_on``), from its allowed CPUs;
- each device's NUMA node (``local_to`` and attr ``numa_node``): from the legacy affinity edge,
  else from its NUMA affinity or its local CPUs.
"""

from __future__ import annotations

from witty_profiler.topology.ids import host_of
from witty_profiler.topology.legacy import values as v
from witty_profiler.topology.legacy.reader import Reader
from witty_profiler.topology.models import Entity
from witty_profiler.topology.vocabulary import E, M, T
from witty_profiler.topology.workload import classify_process


def derive(r: Reader) -> None:
    _process_tree(r)
    _numa_topology(r)
    _placement(r)
    _allowed_nodes(r)
    _device_nodes(r)


def _process_tree(r: Reader) -> None:
    graph = r.graph
    processes = graph.entities(T.PROCESS)
    for p in processes:
        ppid = p.attrs.get("ppid")
        parent = f"process:{p.id.split(':')[1]}:{ppid}"
        if ppid and ppid != p.attrs["pid"] and graph.entity(parent) is not None:
            graph.edge_of(E.PARENT_OF, parent, p.id)
    done: set[str] = set()

    def classify(p: Entity, chain: tuple[str, ...] = ()) -> None:
        if p.id in done or p.id in chain:  # a ppid cycle in a bad file must not recurse forever
            return
        parent = graph.entity(f"process:{p.id.split(':')[1]}:{p.attrs.get('ppid')}")
        if parent is not None and parent.id != p.id:
            classify(parent, chain + (p.id,))
        done.add(p.id)
        found = classify_process(p.attrs.get("name") or "", r.raw_cmdlines.get(p.id, ""),
                                 parent=parent.attrs if parent is not None and parent.id != p.id else None)
        p.attrs.update({k: val for k, val in found.items() if val is not None})

    for p in processes:
        classify(p)


def _numa_topology(r: Reader) -> None:
    graph = r.graph
    for numa_set, nodes in r.numa_sets.items():
        host = host_of(numa_set)
        for n in nodes:
            target = f"numa_node:{host}:{n}"
            if graph.entity(target) is None:
                r.add(T.NUMA_NODE, host, [n], {"node": n})
            graph.edge_of(E.NUMA_SET_CONTAINS, numa_set, target)
    for node in graph.entities(T.NUMA_NODE):
        host = host_of(node.id)
        for other, distance in (node.attrs.get("distances") or {}).items():
            target = f"numa_node:{host}:{other}"
            if target != node.id and graph.entity(target) is not None:
                graph.edge_of(E.NUMA_DISTANCE, node.id, target, attrs={"distance": distance})


def _node_order(r: Reader, host: str, length: int) -> list[int]:
    """The legacy vectors are indexed by the host's NUMA nodes in order; with no node list, by number."""
    nodes = sorted(e.attrs["node"] for e in r.graph.entities(T.NUMA_NODE) if host_of(e.id) == host)
    return nodes if len(nodes) == length else list(range(length))


def colocation_pct(cpu_share: dict[int, float], page_share: dict[int, float]) -> float:
    """Overlap of two distributions over NUMA nodes, in %: 100 when pages sit where the CPU time is."""
    return round(100.0 * sum(min(cpu_share.get(n, 0.0), page_share.get(n, 0.0))
                             for n in set(cpu_share) | set(page_share)), 3)


def _placement(r: Reader) -> None:
    graph = r.graph
    for vec in r.placement:
        process = graph.entity(vec.process)
        host = host_of(vec.process)
        if vec.cpu and vec.pages and len(vec.cpu) != len(vec.pages):
            raise v.LegacyValueError(vec.where, f"{len(vec.cpu)} CPU shares but {len(vec.pages)} page counts")
        order = _node_order(r, host, max(len(vec.cpu), len(vec.pages)))
        cpu_sum, page_sum = sum(vec.cpu), sum(vec.pages)
        cpu = {order[i]: s / cpu_sum for i, s in enumerate(vec.cpu) if s > 0} if cpu_sum > 0 else {}
        pages = {order[i]: p / page_sum for i, p in enumerate(vec.pages) if p > 0} if page_sum > 0 else {}
        for n, share in cpu.items():
            graph.edge_of(E.RUNS_ON, vec.process, f"numa_node:{host}:{n}",
                          metrics={M.RUNTIME_SHARE_PCT: round(100.0 * share, 3)})
            _ensure_numa(r, host, n)
        if cpu:
            process.attrs["numa_cpu_share_pct"] = {str(n): round(100.0 * s, 3) for n, s in sorted(cpu.items())}
            process.attrs["main_numa_node"] = max(sorted(cpu), key=lambda n: cpu[n])
        if cpu and pages:
            process.metrics[M.CPU_MEM_COLOCATION_PCT] = colocation_pct(cpu, pages)
        totals = {int(n): c for n, c in (process.attrs.get("numa_pages") or {}).items()}
        if cpu and sum(totals.values()):
            main = process.attrs["main_numa_node"]
            process.metrics[M.NUMA_REMOTE_PAGES_PCT] = round(100.0 * (1 - totals.get(main, 0) / sum(totals.values())), 3)


def _ensure_numa(r: Reader, host: str, n: int) -> None:
    if r.graph.entity(f"numa_node:{host}:{n}") is None:
        r.add(T.NUMA_NODE, host, [n], {"node": n})


def _numa_cpus(r: Reader) -> dict[str, dict[int, set[int]]]:
    found: dict[str, dict[int, set[int]]] = {}
    for node in r.graph.entities(T.NUMA_NODE):
        if node.attrs.get("cpus"):
            found.setdefault(host_of(node.id), {})[node.attrs["node"]] = set(
                v.cpu_list(node.attrs["cpus"], node.id))
    return found


def _allowed_nodes(r: Reader) -> None:
    numa_cpus = _numa_cpus(r)
    for kind in (T.PROCESS, T.THREAD):
        for task in r.graph.entities(kind):
            if not task.attrs.get("cpus_allowed"):
                continue
            allowed = set(v.cpu_list(task.attrs["cpus_allowed"], task.id))
            host = host_of(task.id)
            for n, cpus in sorted(numa_cpus.get(host, {}).items()):
                if cpus & allowed:
                    r.graph.edge_of(E.ALLOWED_ON, task.id, f"numa_node:{host}:{n}",
                                    metrics={M.CPUS_ALLOWED_COUNT: len(cpus & allowed)})


def _device_nodes(r: Reader) -> None:
    graph = r.graph
    numa_cpus = _numa_cpus(r)
    for kind in (T.NPU, T.GPU):
        for device in graph.entities(kind):
            host = host_of(device.id)
            nodes = sorted({graph.entity(e.target).attrs["node"] for e, _ in graph.neighbours(device.id, "out", E.LOCAL_TO)})
            if not nodes and device.attrs.get("numa_affinity"):
                nodes = v.cpu_list(device.attrs["numa_affinity"], device.id)
            if not nodes and device.attrs.get("cpu_affinity"):
                local = set(v.cpu_list(device.attrs["cpu_affinity"], device.id))
                nodes = [n for n, cpus in sorted(numa_cpus.get(host, {}).items()) if local and local <= cpus]
            for n in nodes:
                _ensure_numa(r, host, n)
                graph.edge_of(E.LOCAL_TO, device.id, f"numa_node:{host}:{n}")
            if nodes:
                device.attrs["numa_node"] = nodes[0] if len(nodes) == 1 else nodes
