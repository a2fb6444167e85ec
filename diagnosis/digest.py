"""Host digests: what cross-host judgement needs of one host, small enough to keep for a thousand.

A digest holds the host's window and collector statuses, each rank's key metrics (the signals that
make a rank slower than its peers) and the host's facts that peers should share (link speeds,
device counts, error rates). It is plain JSON data, so that `cluster diagnose` builds digests in
worker processes and keeps only them; a merged graph gives one digest per host the same way.
"""

from __future__ import annotations

from typing import Any

from witty_profiler.diagnosis.crosshost import mean
from witty_profiler.topology import Entity, Graph
from witty_profiler.topology.hosts import host_windows
from witty_profiler.topology.ids import host_of
from witty_profiler.topology.query import GraphQuery, num
from witty_profiler.topology.vocabulary import E, M, T
from witty_profiler.topology.workload import program

# (key in a rank's digest, unit, the direction in which it is worse, the smallest difference that
# matters): what makes one rank slower than its peers, as the host sees it
RANK_SIGNALS: list[tuple[str, str, str, float]] = [
    (M.CPU_UTIL_PCT, "%", "lower", 10.0),
    (M.RUNQUEUE_WAIT_PCT, "%", "higher", 5.0),
    (M.THROTTLED_PERIODS_PCT, "%", "higher", 5.0),
    (M.NUMA_REMOTE_PAGES_PCT, "%", "higher", 10.0),
    ("loader_cpu_util_pct", "%", "higher", 20.0),
    ("device_util_pct", "%", "lower", 10.0),
    ("device_sm_clock_mhz", "MHz", "lower", 100.0),
    ("device_power_w", "W", "lower", 25.0),
    ("device_temperature_c", "°C", "higher", 5.0),
    ("device_throttled", "devices", "higher", 1.0),
    # storage, memory and network: a rank that waits for its disk, its page cache or a remote store
    (M.IO_BLOCKED_PCT, "%", "higher", 5.0),
    (M.WRITE_BYTES_PER_S, "bytes/s", "higher", 50e6),
    (M.READ_BYTES_PER_S, "bytes/s", "higher", 50e6),
    (M.MAJOR_FAULTS_PER_S, "1/s", "higher", 100.0),
    (M.PSI_IO_SOME_PCT, "%", "higher", 5.0),
    (M.PSI_MEMORY_SOME_PCT, "%", "higher", 5.0),
    ("net_bytes_per_s", "bytes/s", "higher", 50e6),
]
_DEVICE_METRICS = {"device_util_pct": M.UTIL_PCT, "device_sm_clock_mhz": M.SM_CLOCK_MHZ,
                   "device_power_w": M.POWER_W, "device_temperature_c": M.TEMPERATURE_C}


def host_digests(graph: Graph) -> list[dict[str, Any]]:
    """One digest per host of the graph (a host graph gives one, a merged graph one per host)."""
    q = GraphQuery.of(graph)
    hosts = list(graph.meta.hosts) or sorted({host_of(e.id) for e in graph.entities(T.HOST)})
    windows = host_windows(graph)
    by_host: dict[str, list[Entity]] = {}
    for e in graph.entities():  # once: a merged graph of many hosts is not walked once per host
        by_host.setdefault(host_of(e.id), []).append(e)
    ranks: dict[str, list[Entity]] = {}
    for p in _ranks(graph, q):
        ranks.setdefault(host_of(p.id), []).append(p)
    return [{
        "host": host,
        "window": windows.get(host, {}),
        "collectors": _collectors(graph, host),
        "ranks": [_rank(q, p, windows.get(host, {}).get("duration_s")) for p in ranks.get(host, [])],
        "facts": _facts(by_host.get(host, [])),
        "entities": len(by_host.get(host, [])),
    } for host in hosts]


def _collectors(graph: Graph, host: str) -> dict[str, str]:
    """name -> status of this host's collectors (a merged graph names them name@host)."""
    found = {}
    for name, status in graph.meta.collectors.items():
        base, _, where = name.partition("@")
        if not where or where == host:
            found[base] = status.status
    return dict(sorted(found.items()))


def _ranks(graph: Graph, q: GraphQuery) -> list[Entity]:
    """The ranks of distributed jobs: processes that are members of a job, else processes with a rank
    that did not inherit it from a parent with the same rank (a shell or a DataLoader worker)."""
    members = [graph.entity(e.source) for e in graph.edges(E.MEMBER_OF)]
    if members:
        return sorted((p for p in members if p is not None), key=lambda p: p.id)
    ranked = []
    for p in graph.entities(T.PROCESS):
        if p.attrs.get("rank") is None or p.attrs.get("role") in ("loader", "launcher"):
            continue
        parent = q.parent_of(p)
        if parent is not None and parent.attrs.get("rank") == p.attrs.get("rank"):
            continue
        ranked.append(p)
    return ranked


def _rank(q: GraphQuery, p: Entity, window_s: float | None) -> dict[str, Any]:
    jobs = q.out_edges(p.id, E.MEMBER_OF)
    env = p.attrs.get("env") if isinstance(p.attrs.get("env"), dict) else {}
    job = jobs[0].target if jobs else p.attrs.get("job")
    if not job:  # peers of one world: same size and rendezvous address
        master = p.attrs.get("master_addr") or env.get("MASTER_ADDR") or program(str(p.attrs.get("cmdline") or ""))
        job = f"world:{master}:{p.attrs.get('world_size')}"
    metrics = {k: num(p, k) for k in (M.CPU_UTIL_PCT, M.RUNQUEUE_WAIT_PCT, M.NUMA_REMOTE_PAGES_PCT,
                                      M.IO_BLOCKED_PCT, M.READ_BYTES_PER_S, M.WRITE_BYTES_PER_S,
                                      M.MAJOR_FAULTS_PER_S)}
    cgroups = q.targets(p.id, E.IN_CGROUP)
    for metric in (M.THROTTLED_PERIODS_PCT, M.PSI_IO_SOME_PCT, M.PSI_MEMORY_SOME_PCT):  # the worst of its cgroups
        metrics[metric] = max((v for v in (num(c, metric) for c in cgroups) if v is not None), default=None)
    connections = q.targets(p.id, E.OWNS_CONNECTION)
    if connections and window_s:
        moved = sum((num(c, M.BYTES_SENT_TOTAL) or 0.0) + (num(c, M.BYTES_RECEIVED_TOTAL) or 0.0) for c in connections)
        metrics["net_bytes_per_s"] = round(moved / window_s, 1)
    loaders = [c for c in q.children_of(p) if c.attrs.get("role") == "loader"]
    if loaders:
        metrics["loader_cpu_util_pct"] = sum(num(c, M.CPU_UTIL_PCT) or 0.0 for c in loaders)
    devices = [d for _, d in q.devices_of(p)]
    for key, metric in _DEVICE_METRICS.items():
        values = [v for v in (num(d, metric) for d in devices) if v is not None]
        metrics[key] = round(mean(values), 3) if values else None
    if devices:
        metrics["device_throttled"] = sum(1 for d in devices if num(d, M.THROTTLE_THERMAL) or num(d, M.THROTTLE_POWER))
    return {"id": p.id, "name": p.attrs.get("name"), "rank": p.attrs.get("rank"), "job": job,
            "role": p.attrs.get("role"), "devices": [d.id for d in devices],
            "metrics": {k: v for k, v in metrics.items() if v is not None}}


def _facts(mine: list[Entity]) -> dict[str, Any]:
    """What peers of one cluster should share: 'what' -> value (a number or a word), from one host's entities."""
    facts: dict[str, Any] = {}
    by_type: dict[str, list[Entity]] = {}
    for e in mine:
        by_type.setdefault(e.type, []).append(e)
    for kind in (T.GPU, T.NPU, T.RDMA_PORT):
        if by_type.get(kind):
            facts[f"{kind} count"] = len(by_type[kind])
    for nic in by_type.get(T.NIC, []):
        name = nic.id.split(":", 2)[2]
        if not nic.attrs.get("pci_address") and nic.attrs.get("virtual") is not False:
            # loopback, bridges, veth pairs: named differently on every host. A NIC known to be physical
            # without its PCI address (Prometheus: a permanent MAC address) is compared too.
            continue
        speed = num(nic, M.SPEED_MBPS) if num(nic, M.SPEED_MBPS) is not None else nic.attrs.get("speed_mbps")
        if isinstance(speed, (int, float)) and speed > 0:
            facts[f"nic {name} speed_mbps"] = speed
        for attr in ("operstate", "mtu"):
            if isinstance(nic.attrs.get(attr), (str, int)) and not isinstance(nic.attrs.get(attr), bool):
                facts[f"nic {name} {attr}"] = nic.attrs[attr]
        errors = sum(num(nic, m) or 0.0 for m in (M.RX_ERRORS_PER_S, M.TX_ERRORS_PER_S, M.RX_DROPS_PER_S,
                                                   M.TX_DROPS_PER_S))
        facts[f"nic {name} errors_per_s"] = round(errors, 3)
    for port in by_type.get(T.RDMA_PORT, []):
        name = port.id.split(":", 2)[2]
        if num(port, M.RATE_GBPS) is not None:
            facts[f"rdma {name} rate_gbps"] = num(port, M.RATE_GBPS)
        if port.attrs.get("state") is not None:
            facts[f"rdma {name} state"] = str(port.attrs.get("state"))
        facts[f"rdma {name} errors_per_s"] = round(num(port, M.PORT_ERRORS_PER_S) or 0.0, 3)
        for what, metric in (("retrans_per_s", M.PORT_RETRANS_PER_S), ("pfc_rx_per_s", M.PFC_RX_FRAMES_PER_S)):
            if num(port, metric) is not None:
                facts[f"rdma {name} {what}"] = round(num(port, metric) or 0.0, 3)
    degraded = [d.id for kind in (T.GPU, T.NPU, T.PCI_DEVICE) for d in by_type.get(kind, []) if _degraded(d)]
    if any(by_type.get(kind) for kind in (T.GPU, T.NPU)):
        facts["degraded pcie links"] = len(degraded)
    for npu in by_type.get(T.NPU, []):
        if npu.attrs.get("health") not in (None, "OK"):
            facts[f"npu {npu.attrs.get('index', npu.id)} health"] = str(npu.attrs.get("health"))
    return dict(sorted(facts.items()))


def _degraded(device: Entity) -> bool:
    if device.attrs.get("pcie_link_degraded"):
        return True
    for now, top in ((M.LINK_WIDTH, M.LINK_WIDTH_MAX), (M.LINK_SPEED_GTS, M.LINK_SPEED_MAX_GTS),
                     (M.PCIE_LINK_WIDTH, M.PCIE_LINK_WIDTH_MAX)):
        a, b = num(device, now), num(device, top)
        if a is not None and b is not None and a < b:
            return True
    return False
