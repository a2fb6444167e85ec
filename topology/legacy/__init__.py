"""Reader for the original witty-profiler's graph JSON: bare ``{nodes, edges}`` or ``{env, content}``.

That format embeds full copies of both endpoints in every edge, has no ids (they are rebuilt
from each type's key fields: `topology.legacy.entities`), keeps the process tree only in
``ppid`` and a thread's process only in its nested object, and records placement as per-node
vectors whose summary ``cpu_mem_access_cosine_similarity`` is not a cosine. `from_legacy`
maps every entity and edge type (`entities`, `edges`), rebuilds what is implicit (`derive`),
and says in ``meta.collectors`` what the format could not measure. Types this version does not
know become ``opaque`` entities and ``related`` edges; impossible values (negative pids or page
counts, NUMA distances below 10...) are a `GraphFormatError` naming the field.
"""

from __future__ import annotations

import json
from typing import Any

from witty_profiler.topology.cpulist import parse_cpulist
from witty_profiler.topology.errors import GraphFormatError
from witty_profiler.topology.graph import Graph
from witty_profiler.topology.ids import host_of
from witty_profiler.topology.legacy.derive import colocation_pct, derive
from witty_profiler.topology.legacy.edges import read_edge
from witty_profiler.topology.legacy.reader import Reader
from witty_profiler.topology.legacy.values import LegacyValueError
from witty_profiler.topology.models import CollectorStatus, Meta
from witty_profiler.topology.privacy import redact_text
from witty_profiler.topology.vocabulary import T
from witty_profiler.topology.wording import counted

__all__ = ["colocation_pct", "from_legacy", "is_legacy"]


def is_legacy(data: Any) -> bool:
    """True for a bare ``{nodes, edges}`` document or an ``{env, content}`` envelope around one."""
    if isinstance(data, dict) and "content" in data and ("env" in data or "nodes" not in data):
        content = data["content"]
        if isinstance(content, str):  # some servers send the graph as a JSON string inside the envelope
            return content.lstrip().startswith("{")
        data = content
    return isinstance(data, dict) and isinstance(data.get("nodes"), list) and isinstance(data.get("edges"), list)


def _unwrap(data: Any, name: str) -> tuple[list, list, dict]:
    env: dict = {}
    if isinstance(data, dict) and "content" in data and ("env" in data or "nodes" not in data):
        env = data.get("env") if isinstance(data.get("env"), dict) else {}
        data = data["content"]
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as exc:
                raise GraphFormatError(f"{name}: content: not valid JSON ({exc.msg} at line {exc.lineno} "
                                       f"column {exc.colno})") from None
    if not (isinstance(data, dict) and isinstance(data.get("nodes"), list) and isinstance(data.get("edges"), list)):
        raise GraphFormatError(f"{name}: not a legacy witty-profiler graph: expected {{nodes: [...], edges: [...]}}")
    return data["nodes"], data["edges"], env


def from_legacy(data: Any, name: str = "<input>") -> Graph:
    nodes, edges, env = _unwrap(data, name)
    r = Reader()
    try:
        for i, node in enumerate(nodes):
            if isinstance(node, dict):
                r.count(str(node.get("entity_type") or "unknown"))
            r.entity(node, f"nodes[{i}]")
        for i, edge in enumerate(edges):
            read_edge(r, edge, f"edges[{i}]")
        derive(r)
    except LegacyValueError as exc:
        raise GraphFormatError(f"{name}: legacy graph: {exc}") from None
    r.graph.meta = _meta(r, env)
    return r.graph


def _meta(r: Reader, env: dict) -> Meta:
    hosts = sorted(r.hosts)
    host_info: dict[str, dict[str, Any]] = {}
    if env and len(hosts) == 1:
        host_info[hosts[0]] = {k: redact_text(str(env[k])) for k in ("hostname", "local_ip")
                               if env.get(k) not in (None, "None")}
    host_info = {h: info for h, info in host_info.items() if info}
    for host in hosts:
        numa = [e for e in r.graph.entities(T.NUMA_NODE) if host_of(e.id) == host]
        cpus = sum(len(parse_cpulist(e.attrs.get("cpus"))) for e in numa)
        if numa:
            host_info.setdefault(host, {}).update({"numa_nodes": len(numa), "cpus": cpus or None})
    return Meta(hosts=hosts, source="legacy", host_info={h: {k: v for k, v in i.items() if v is not None}
                                                         for h, i in host_info.items()},
                collectors=_coverage(r), extra={"legacy_types": dict(sorted(r.legacy_types.items()))})


_NO_WINDOW = "legacy snapshot without a capture window"


def _coverage(r: Reader) -> dict[str, CollectorStatus]:
    """What the legacy file could and could not tell, per domain, so a diagnosis can say not_evaluated."""
    counts, _ = r.graph.counts_by_type()
    types = r.legacy_types

    def seen(*names: str) -> bool:
        return any(types.get(n) for n in names)

    out = {
        "host": CollectorStatus(status="unavailable", reason=(
            f"{_NO_WINDOW}: host CPU utilisation, iowait, load, PSI, memory pressure and swap were not recorded")),
        "process": CollectorStatus(status="partial" if counts.get(T.PROCESS) else "unavailable", reason=(
            f"{_NO_WINDOW}: process tree, allowed CPUs, per-node pages and traced CPU time per NUMA node only; "
            "no CPU utilisation, run-queue wait, RSS or I/O rates; context switches are totals since start")),
        "numa": CollectorStatus(status="ok" if counts.get(T.NUMA_NODE) else "unavailable", reason=(
            "NUMA nodes, CPUs, distances and memory; numastat counters are totals since boot (no rates)"
            if counts.get(T.NUMA_NODE) else "no NUMA nodes in the legacy file")),
        "storage": CollectorStatus(status="unavailable", reason="disks and I/O are not recorded by the legacy format"),
        "network": CollectorStatus(status="unavailable", reason=(
            "NIC throughput, drops, TCP retransmits and RTT are not recorded by the legacy format")),
        "cgroup": CollectorStatus(status="unavailable", reason=(
            "cgroup CPU quota throttling and memory pressure are not recorded by the legacy format")),
        "pmu": CollectorStatus(status="partial" if r.seen_cache_misses else "unavailable", reason=(
            "cache-miss counts only (no IPC, no miss rates)" if r.seen_cache_misses
            else "no IPC or LLC miss figures in the legacy file")),
    }
    if r.flow_window_ns:
        start, end = r.flow_window_ns
        out["sockets"] = CollectorStatus(status="partial", reason=(
            f"TCP send flows traced over {round((end - start) / 1e9, 3)} s (bytes and packets per thread and "
            "socket); no RTT, retransmits or receive side"))
    else:
        out["sockets"] = CollectorStatus(status="unavailable", reason="no socket flows in the legacy file")
    for kind in ("npu", "gpu"):
        out[kind] = CollectorStatus(status="partial", reason=(
            f"{counted(counts[kind], kind.upper() + 's')} with PCI address and NUMA affinity only: no utilisation, memory, "
            "clocks, power or PCIe link figures")) if counts.get(kind) else CollectorStatus(
            status="unavailable", reason=f"no {kind.upper()} in the legacy file")
    out["ipc"] = CollectorStatus(status="partial", reason="legacy IPC and shared-memory edges without volumes") \
        if seen("IPCEdge") or counts.get(T.SHARED_MEMORY) else CollectorStatus(
        status="unavailable", reason="no pipe, unix socket or shared-memory records in the legacy file")
    if counts.get(T.RDMA_DEVICE) or counts.get(T.RDMA_PORT):
        out["rdma"] = CollectorStatus(status="partial", reason="RDMA resources and packet rates; no bandwidth or errors")
    return dict(sorted(out.items()))
