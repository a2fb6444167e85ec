"""One reader per legacy edge type; the endpoint copies embedded in each edge become entities first.

| legacy edge                          | edges                                                     |
|--------------------------------------|-----------------------------------------------------------|
| OwnEdge / BelongEdge (reversed)      | has_thread, has_socket, or owns                           |
| SendToSocketEdge                     | sends_to (bytes_total, packets_total, bytes_per_s)        |
| AccessWithProcStatusEdge             | thread attrs (allowed/ran-on CPUs...), runs_on per node   |
| NumaAccessEdge                       | allocates_on, runs_on, co-location metrics on the process |
| NumaSetContainEdge                   | numa_set_contains                                         |
| AffinitativeToNuma                   | local_to (device -> each node of the set)                 |
| AccessEdge                           | uses_device (process -> gpu/npu), uses_shm, or accesses   |
| RunOnEdge / HostEdge (reversed)      | in_container                                              |
| ConnectToEdge                        | connects_to                                               |
| HasAttributeEdge                     | has_port (rdma_device -> rdma_port), else related         |
| IPCEdge                              | ipc                                                       |
| *BandwidthEdge (HCCS, DDR, HHA, L3C, PA) | uncore_bandwidth attrs (+ DDR rates) on the NUMA node |
| anything else                        | related (legacy_type and fields kept)                     |
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from witty_profiler.topology.cpulist import format_cpulist
from witty_profiler.topology.ids import host_of
from witty_profiler.topology.legacy import values as v
from witty_profiler.topology.legacy.reader import PlacementVectors, Reader, kind_of, redact_values
from witty_profiler.topology.vocabulary import E, M, T

_BASE_FIELDS = ("edge_type", "weight", "source_node", "target_node", "nodes")
Handler = Callable[[Reader, str, str, dict, str], None]


def read_edge(r: Reader, edge: Any, where: str) -> None:
    if not isinstance(edge, dict):
        raise v.LegacyValueError(where, f"expected an edge object, found {type(edge).__name__}")
    kind = edge.get("edge_type")
    kind = kind if isinstance(kind, str) else "unknown"
    r.count(kind)
    if isinstance(edge.get("source_node"), dict) and isinstance(edge.get("target_node"), dict):
        pairs = [(r.entity(edge["source_node"], f"{where}.source_node"),
                  r.entity(edge["target_node"], f"{where}.target_node"))]
    elif isinstance(edge.get("nodes"), list):  # the legacy UndirectedEdge
        ids = [r.entity(n, f"{where}.nodes[{i}]") for i, n in enumerate(edge["nodes"])]
        pairs = [(ids[0], other) for other in ids[1:]]
    else:
        raise v.LegacyValueError(where, "an edge needs source_node and target_node objects (or nodes)")
    handler = HANDLERS.get(kind)
    if handler is None and kind.endswith("BandwidthEdge"):
        handler = read_bandwidth
    for source, target in pairs:
        (handler or read_related)(r, source, target, edge, where)


def read_own(r: Reader, owner: str, owned: str, edge: dict, where: str) -> None:
    kinds = (kind_of(owner), kind_of(owned))
    if kinds == (T.PROCESS, T.THREAD):
        r.link(E.HAS_THREAD, owner, owned)
    elif kinds[0] in (T.PROCESS, T.THREAD) and kinds[1] == T.SOCKET:
        r.link(E.HAS_SOCKET, owner, owned)
    else:
        r.link(E.OWNS, owner, owned, _legacy_attrs(edge))


def read_belong(r: Reader, part: str, whole: str, edge: dict, where: str) -> None:
    read_own(r, whole, part, edge, where)  # "A belongs to B" is "B owns A"


def read_send(r: Reader, sender: str, socket: str, edge: dict, where: str) -> None:
    flow = v.mapping(edge.get("data_flow"), f"{where}.data_flow")
    size = v.integer(flow.get("data_size", 0), f"{where}.data_flow.data_size")
    packets = v.integer(flow.get("packets_cnt", 0), f"{where}.data_flow.packets_cnt")
    start = v.integer(flow.get("start_time", -1), f"{where}.data_flow.start_time", minimum=-1)
    end = v.integer(flow.get("end_time", -1), f"{where}.data_flow.end_time", minimum=-1)
    if start >= 0 and end >= 0 and end < start:
        raise v.LegacyValueError(f"{where}.data_flow.end_time", f"ends ({end}) before it starts ({start})")
    metrics: dict[str, Any] = {M.BYTES_TOTAL: size, M.PACKETS_TOTAL: packets}
    if start >= 0 and end > start:
        metrics[M.BYTES_PER_S] = round(size / ((end - start) / 1e9), 3)
        r.flow_window_ns[:] = [min(start, r.flow_window_ns[0]), max(end, r.flow_window_ns[1])] \
            if r.flow_window_ns else [start, end]
    r.link(E.SENDS_TO, sender, socket, {
        "protocol": v.text(edge.get("connection_type"), f"{where}.connection_type"),
        "start_ns": start if start >= 0 else None, "end_ns": end if end >= 0 else None,
    }, metrics)


def apply_proc_status(r: Reader, task: str, status: Any, where: str, with_runtime: bool) -> None:
    """/proc/<id>/status and the scheduler trace, as the legacy tool saw them, onto a task."""
    status = v.mapping(status, where)
    entity = r.graph.entity(task)
    if entity is None or entity.type not in (T.PROCESS, T.THREAD):
        return
    allowed = v.cpu_list(status.get("cpus_allowed_list"), f"{where}.cpus_allowed_list")
    preferred = v.cpu_list(status.get("cpus_preferred_list"), f"{where}.cpus_preferred_list")
    ran = v.cpu_list(status.get("cpus_accessed_list"), f"{where}.cpus_accessed_list")
    mems = v.cpu_list(status.get("mems_allowed_list"), f"{where}.mems_allowed_list")
    attrs: dict[str, Any] = {
        "cpus_allowed": format_cpulist(allowed) if allowed else None,
        "cpus_preferred": format_cpulist(preferred) if preferred else None,
        "mems_allowed": format_cpulist(mems) if mems else None,
    }
    # cumulative since the task started (no time base): attrs, never rates
    for key in ("voluntary_ctxt_switches", "involuntary_ctxt_switches"):
        if key in status:
            count = v.integer(status[key], f"{where}.{key}", minimum=-1)
            attrs[key] = count if count >= 0 else None
    if with_runtime:
        attrs["ran_on_cpus"] = format_cpulist(ran) if ran else None
        runtime = v.node_counts(status.get("numa_index_to_cpu_runtime"), f"{where}.numa_index_to_cpu_runtime",
                                real=True)
        attrs["numa_runtime_ns"] = {str(n): int(ns) for n, ns in runtime.items()} or None
        total = sum(runtime.values())
        for n, ns in runtime.items():
            r.link(E.RUNS_ON, task, _numa(r, task, n), metrics={
                M.RUNTIME_NS_TOTAL: int(ns), M.RUNTIME_SHARE_PCT: round(100.0 * ns / total, 3) if total else 0.0})
    entity.attrs.update({k: val for k, val in attrs.items() if val is not None})
    if allowed:
        entity.metrics[M.CPUS_ALLOWED_COUNT] = len(allowed)


def read_proc_status(r: Reader, task: str, numa_set: str, edge: dict, where: str) -> None:
    apply_proc_status(r, task, edge.get("proc_status"), f"{where}.proc_status", with_runtime=True)


def read_numa_access(r: Reader, process: str, numa_set: str, edge: dict, where: str) -> None:
    info = v.mapping(edge.get("numa_access_info"), f"{where}.numa_access_info")
    where = f"{where}.numa_access_info"
    entity = r.graph.entity(process)
    if entity is None or entity.type != T.PROCESS:
        return read_related(r, process, numa_set, edge, where)
    # the process-level status is the main thread's; its run time per node is the thread's, so skip it
    apply_proc_status(r, process, info.get("proc_status"), f"{where}.proc_status", with_runtime=False)
    total = v.node_counts(info.get("total_pages"), f"{where}.total_pages")
    anon = v.node_counts(info.get("dirty_anon_pages"), f"{where}.dirty_anon_pages")
    read_only = v.node_counts(info.get("read_only_pages"), f"{where}.read_only_pages")
    all_pages = sum(total.values())
    for n, pages in total.items():
        r.link(E.ALLOCATES_ON, process, _numa(r, process, n),
               {"dirty_anon_pages": anon.get(n), "read_only_pages": read_only.get(n)},
               {M.PAGES: pages, M.PAGE_SHARE_PCT: round(100.0 * pages / all_pages, 3) if all_pages else 0.0})
    entity.attrs.update({k: {str(n): c for n, c in d.items()} for k, d in
                         (("numa_pages", total), ("numa_anon_pages", anon), ("numa_read_only_pages", read_only)) if d})
    if total:
        entity.metrics[M.NUMA_PAGES_TOTAL] = all_pages
    affinity = v.mapping(info.get("numa_affinity_info"), f"{where}.numa_affinity_info")
    if affinity:
        aw = f"{where}.numa_affinity_info"
        cpu = v.vector(affinity.get("cpu_runtime_pct_in_each_numa"), f"{aw}.cpu_runtime_pct_in_each_numa", real=True)
        pages = v.vector(affinity.get("mem_pages_in_each_numa"), f"{aw}.mem_pages_in_each_numa", real=False)
        if any(share > 1.0 + 1e-6 for share in cpu):
            raise v.LegacyValueError(f"{aw}.cpu_runtime_pct_in_each_numa", "a share above 1 is impossible")
        r.placement.append(PlacementVectors(process, cpu, pages, aw))
        raw = affinity.get("cpu_mem_access_cosine_similarity")
        if raw is not None:
            # not a cosine: the legacy tool computes sum(cpu_share * page_share); kept raw under an honest name
            entity.attrs["legacy_cpu_mem_dot_product"] = v.number(raw, f"{aw}.cpu_mem_access_cosine_similarity")
    if info.get("cache_miss_stats") or edge.get("cache_miss_stats"):
        r.seen_cache_misses = True
        entity.attrs["legacy_cache_misses"] = redact_values(info.get("cache_miss_stats") or edge["cache_miss_stats"])


def read_set_contains(r: Reader, numa_set: str, numa: str, edge: dict, where: str) -> None:
    r.link(E.NUMA_SET_CONTAINS, numa_set, numa)


def read_affinity(r: Reader, device: str, numa_set: str, edge: dict, where: str) -> None:
    if kind_of(numa_set) != T.NUMA_SET:
        return read_related(r, device, numa_set, edge, where)
    for n in r.numa_sets.get(numa_set, []):
        r.link(E.LOCAL_TO, device, _numa(r, device, n))


def read_access(r: Reader, user: str, used: str, edge: dict, where: str) -> None:
    kinds = (kind_of(user), kind_of(used))
    if kinds[0] in (T.PROCESS, T.THREAD) and kinds[1] in (T.NPU, T.GPU):
        r.link(E.USES_DEVICE, user, used)
    elif kinds == (T.PROCESS, T.SHARED_MEMORY):
        r.link(E.USES_SHM, user, used)
    else:
        r.link(E.ACCESSES, user, used, _legacy_attrs(edge))


def read_run_on(r: Reader, process: str, place: str, edge: dict, where: str) -> None:
    if kind_of(place) == T.CONTAINER:
        r.link(E.IN_CONTAINER, process, place)
    else:
        read_related(r, process, place, edge, where)


def read_host(r: Reader, place: str, process: str, edge: dict, where: str) -> None:
    read_run_on(r, process, place, edge, where)  # "A hosts B" is "B runs on A"


def read_has_attribute(r: Reader, owner: str, attribute: str, edge: dict, where: str) -> None:
    if (kind_of(owner), kind_of(attribute)) == (T.RDMA_DEVICE, T.RDMA_PORT):
        r.link(E.HAS_PORT, owner, attribute)
    else:
        read_related(r, owner, attribute, edge, where)


def read_connect(r: Reader, source: str, target: str, edge: dict, where: str) -> None:
    r.link(E.CONNECTS_TO, source, target, _legacy_attrs(edge))


def read_ipc(r: Reader, source: str, target: str, edge: dict, where: str) -> None:
    r.link(E.IPC, source, target, _legacy_attrs(edge))


_DDR_RATES = (("read_bw", M.MEM_READ_BYTES_PER_S), ("write_bw", M.MEM_WRITE_BYTES_PER_S))


def read_bandwidth(r: Reader, source: str, target: str, edge: dict, where: str) -> None:
    """Uncore PMU bandwidth of one NUMA node (the legacy tool draws it as a self-loop)."""
    entity = r.graph.entity(source)
    info = v.mapping(edge.get("bandwidth_info"), f"{where}.bandwidth_info")
    for key, value in info.items():
        v.number(value, f"{where}.bandwidth_info.{key}")  # rates and a timestamp: never negative
    if source != target or entity is None or entity.type != T.NUMA_NODE:
        return read_related(r, source, target, edge, where)
    kind = edge["edge_type"].removesuffix("BandwidthEdge").lower()
    entity.attrs.setdefault("uncore_bandwidth", {})[kind] = dict(info)
    if kind == "ddr":
        for legacy_name, metric in _DDR_RATES:
            if legacy_name in info:
                entity.metrics[metric] = round(info[legacy_name] * 1e9, 3)  # GB/s


def read_related(r: Reader, source: str, target: str, edge: dict, where: str) -> None:
    legacy_type = str(edge.get("edge_type") or "unknown")
    r.link(E.RELATED, source, target, {"legacy_type": legacy_type, **_legacy_attrs(edge)}, qualifier=legacy_type)


def _legacy_attrs(edge: dict) -> dict[str, Any]:
    fields = {k: val for k, val in edge.items() if k not in _BASE_FIELDS}
    attrs: dict[str, Any] = {"fields": redact_values(fields)} if fields else {}
    if edge.get("weight"):
        attrs["legacy_weight"] = edge["weight"]
    return attrs


def _numa(r: Reader, near: str, node: int) -> str:
    """The NUMA node entity on the same host as `near` (created bare if the file never listed it)."""
    host = host_of(near)
    eid = f"numa_node:{host}:{node}"
    if r.graph.entity(eid) is None:
        r.add(T.NUMA_NODE, host, [node], {"node": node})
    return eid


HANDLERS: dict[str, Handler] = {
    "OwnEdge": read_own,
    "BelongEdge": read_belong,
    "SendToSocketEdge": read_send,
    "AccessWithProcStatusEdge": read_proc_status,
    "NumaAccessEdge": read_numa_access,
    "NumaSetContainEdge": read_set_contains,
    "AffinitativeToNuma": read_affinity,
    "AccessEdge": read_access,
    "RunOnEdge": read_run_on,
    "HostEdge": read_host,
    "HasAttributeEdge": read_has_attribute,
    "ConnectToEdge": read_connect,
    "IPCEdge": read_ipc,
}
