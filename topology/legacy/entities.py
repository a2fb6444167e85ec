"""One reader per legacy entity type: rebuild a stable id from the type's key fields, map the fields.

| legacy entity            | entity                                              |
|--------------------------|-----------------------------------------------------|
| ProcessEntity            | process:<ns>:<pid>                                  |
| ThreadEntity             | thread:<ns>:<pid>:<tid> (+ has_thread from process) |
| SocketEntity             | socket:<ns>:<proto>:<addr>:<port>                   |
| NumaEntity               | numa_node:<ns>:<n>                                  |
| NumaSetEntity            | numa_set:<ns>:<list>                                |
| NPUEntity / GPUEntity    | npu / gpu:<ns>:<pci address> (index if no address)  |
| ContainerEntity, PodEntity | container:<ns>:<id>                               |
| SharedMemoryEntity       | shared_memory:<ns>:<name>                           |
| RdmaDevice               | rdma_device:<ns>:<dev> (+ rdma_port per stats key)  |
| RdmaStatisticPerSecond   | rdma_port:<ns>:<dev>:<port>                         |
| Rdma{ProtectionDomain, LocalQueuePair, QueuePairEndpoint, MemoryRegion} | rdma_resource:<ns>:<pd/qp/mr>:... |
| anything else            | opaque:<ns>:<legacy type>:<digest>                  |
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from witty_profiler.topology.cpulist import format_cpulist
from witty_profiler.topology.ids import pci_address
from witty_profiler.topology.legacy import values as v
from witty_profiler.topology.legacy.reader import Reader, digest, redact_values
from witty_profiler.topology.privacy import redact_cmdline
from witty_profiler.topology.vocabulary import E, M, T

_BASE_FIELDS = ("entity_namespace", "entity_type", "details")
_PCI = re.compile(r"^([0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def read_process(r: Reader, node: dict, where: str) -> str:
    host = r.host_of(node)
    # the legacy tool gives processes it could not identify placeholder pids below -1000: impossible here
    pid = v.integer(node.get("pid"), f"{where}.pid", minimum=0)
    ppid = v.integer(node.get("ppid", -1), f"{where}.ppid", minimum=-1)  # -1: the legacy "unknown"
    cmdline = v.text(node.get("cmdline"), f"{where}.cmdline")
    eid = r.add(T.PROCESS, host, [pid], {
        "pid": pid, "ppid": ppid if ppid >= 0 else None, "name": v.text(node.get("name"), f"{where}.name"),
        "cmdline": redact_cmdline(cmdline) if cmdline is not None else None,
    }, details=node.get("details"))
    if cmdline is not None:
        r.raw_cmdlines[eid] = cmdline
    return eid


def read_thread(r: Reader, node: dict, where: str) -> str:
    host = r.host_of(node)
    tid = v.integer(node.get("tid"), f"{where}.tid", minimum=0)
    process = node.get(T.PROCESS)
    if not isinstance(process, dict):
        raise v.LegacyValueError(f"{where}.process", "a thread needs its process object (with its pid)")
    pid_entity = read_process(r, process, f"{where}.process")
    pid = r.graph.entity(pid_entity).attrs["pid"]
    eid = r.add(T.THREAD, host, [pid, tid], {"tid": tid, "pid": pid, "name": v.text(node.get("name"), f"{where}.name")},
                details=node.get("details"))
    r.link(E.HAS_THREAD, pid_entity, eid)
    return eid


def read_socket(r: Reader, node: dict, where: str) -> str:
    host = r.host_of(node)
    proto = (v.text(node.get("socket_type"), f"{where}.socket_type", "TCP") or "TCP").lower()
    addr = v.text(node.get("socket_addr"), f"{where}.socket_addr", "unknown") or "unknown"
    port = v.integer(node.get("socket_port", -1), f"{where}.socket_port", minimum=-1, maximum=65535)
    shown_addr = f"[{addr}]" if ":" in addr else addr  # IPv6: keep the id's ':' fields readable
    eid = r.add(T.SOCKET, host, [proto, shown_addr, port if port >= 0 else "unknown"],
                {"proto": proto, "addr": addr, "port": port if port >= 0 else None}, details=node.get("details"))
    for key in ("socket_thread", "socket_process"):
        owner = node.get(key)
        if isinstance(owner, dict):
            r.link(E.HAS_SOCKET, r.entity(owner, f"{where}.{key}"), eid)
    return eid


def read_numa(r: Reader, node: dict, where: str) -> str:
    host = r.host_of(node)
    n = v.integer(node.get("numa_id"), f"{where}.numa_id")
    cpus = v.cpu_list(node.get("cpu_set"), f"{where}.cpu_set")
    distances = {}
    for key, d in v.mapping(node.get("distance_to_all_numa"), f"{where}.distance_to_all_numa").items():
        other = v.node_key(key, f"{where}.distance_to_all_numa[{key!r}]")
        # SLIT distances: 10 is local, anything below 10 cannot be
        distances[str(other)] = v.integer(d, f"{where}.distance_to_all_numa[{key!r}]", minimum=10, maximum=255)
    if str(n) in distances and distances[str(n)] != 10:
        raise v.LegacyValueError(f"{where}.distance_to_all_numa[{str(n)!r}]",
                                 f"a node's distance to itself is 10, found {distances[str(n)]}")
    stats = {k: v.integer(c, f"{where}.numa_stats.{k}") for k, c in v.mapping(node.get("numa_stats"),
                                                                                f"{where}.numa_stats").items()}
    sizes, counts = v.meminfo(node.get("mem_info"), f"{where}.mem_info")
    metrics: dict[str, Any] = {}
    if "MemTotal" in sizes:
        metrics[M.MEM_TOTAL_BYTES] = sizes["MemTotal"]
        if "MemFree" in sizes:
            if sizes["MemFree"] > sizes["MemTotal"]:
                raise v.LegacyValueError(f"{where}.mem_info.MemFree", "larger than MemTotal")
            metrics[M.MEM_FREE_BYTES] = sizes["MemFree"]
            if sizes["MemTotal"]:
                metrics[M.MEM_USED_PCT] = round(100.0 * (1 - sizes["MemFree"] / sizes["MemTotal"]), 3)
    # cumulative since boot: kept under the names the vocabulary marks "legacy: no time base"
    for legacy_name, metric in (("numa_hit", M.NUMA_HIT), ("numa_miss", M.NUMA_MISS),
                                ("local_node", M.NUMA_LOCAL), ("other_node", M.NUMA_OTHER)):
        if legacy_name in stats:
            metrics[metric] = stats[legacy_name]
    return r.add(T.NUMA_NODE, host, [n], {
        "node": n, "cpus": format_cpulist(cpus), "memory_blocks": v.text(node.get("memory_set"), f"{where}.memory_set"),
        "distances": dict(sorted(distances.items(), key=lambda kv: int(kv[0]))) or None,
        "numa_stats": stats or None, "meminfo_bytes": sizes or None, "meminfo_counts": counts or None,
    }, metrics, details=node.get("details"))


def read_numa_set(r: Reader, node: dict, where: str) -> str:
    host = r.host_of(node)
    nodes = v.cpu_list(node.get("numa_id_str"), f"{where}.numa_id_str")
    spec = format_cpulist(nodes)
    eid = r.add(T.NUMA_SET, host, [spec or "none"], {"nodes": nodes, "spec": spec}, details=node.get("details"))
    r.numa_sets[eid] = nodes
    return eid


def read_device(kind: str) -> Callable[[Reader, dict, str], str]:
    def read(r: Reader, node: dict, where: str) -> str:
        host = r.host_of(node)
        index = v.integer(node.get("id", -1), f"{where}.id", minimum=-1)  # -1: the legacy "unknown"
        bus = v.text(node.get("pci_bus_id"), f"{where}.pci_bus_id")
        address = pci_address(bus) if bus and _PCI.match(bus.strip()) else None
        device_id = v.text(node.get("device_id"), f"{where}.device_id")
        affinity = node.get("cpu_affinity")
        cpus = v.cpu_list(affinity, f"{where}.cpu_affinity") if affinity not in (None, "") else None
        numa = node.get("numa_affinity")
        numa_nodes = v.cpu_list(numa, f"{where}.numa_affinity") if numa not in (None, "") else None
        if address:
            key = address
        elif index >= 0:
            key = str(index)
        elif device_id and "unknown" not in device_id:
            key = device_id
        else:
            raise v.LegacyValueError(where, f"a {kind.upper()} without pci_bus_id, id or device_id cannot be told apart")
        return r.add(kind, host, [key], {
            "index": index if index >= 0 else None, "pci_address": address,
            "device_id": device_id if device_id and "unknown" not in device_id else None,
            "cpu_affinity": format_cpulist(cpus) if cpus else None,
            "numa_affinity": format_cpulist(numa_nodes) if numa_nodes else None,
        }, details=node.get("details"))
    return read


def read_container(r: Reader, node: dict, where: str) -> str:
    host = r.host_of(node)
    cid = v.text(node.get("container_id"), f"{where}.container_id") or "unknown"
    return r.add(T.CONTAINER, host, [cid], {
        "container_id": cid, "name": v.text(node.get("container_name"), f"{where}.container_name"),
        "runtime": v.text(node.get("container_type"), f"{where}.container_type"),
    }, details=node.get("details"))


def read_pod(r: Reader, node: dict, where: str) -> str:
    host = r.host_of(node)
    pod = v.text(node.get("pod_id"), f"{where}.pod_id") or "unknown"
    return r.add(T.CONTAINER, host, [pod], {"pod": pod, "runtime": "pod"}, details=node.get("details"))


def read_shared_memory(r: Reader, node: dict, where: str) -> str:
    host = r.host_of(node)
    name = v.text(node.get("shm_name"), f"{where}.shm_name") or "unknown"
    size = v.integer(node.get("shm_size", -1), f"{where}.shm_size", minimum=-1)
    return r.add(T.SHARED_MEMORY, host, [name.replace(":", "_")],
                 {"name": name, "size_bytes": size if size >= 0 else None}, details=node.get("details"))


def read_rdma_device(r: Reader, node: dict, where: str) -> str:
    host = r.host_of(node)
    dev = v.text(node.get("dev"), f"{where}.dev") or "unknown"
    eid = r.add(T.RDMA_DEVICE, host, [dev], {"name": dev}, details=node.get("details"))
    for key, stat in v.mapping(node.get("stats"), f"{where}.stats").items():
        if isinstance(stat, dict):
            port = read_rdma_port(r, {"dev": dev, **stat, "entity_namespace": host}, f"{where}.stats[{key!r}]")
            r.link(E.HAS_PORT, eid, port)
    return eid


def read_rdma_port(r: Reader, node: dict, where: str) -> str:
    host = r.host_of(node)
    dev = v.text(node.get("dev"), f"{where}.dev") or "unknown"
    port = v.integer(node.get("port", -1), f"{where}.port", minimum=-1)
    rates = {k: v.number(node.get(k, 0), f"{where}.{k}") for k in
             ("send_pkts", "recv_pkts", "dupl_pkts", "rdma_sends", "rdma_recvs")}
    return r.add(T.RDMA_PORT, host, [dev, port if port >= 0 else "unknown"], {
        "device": dev, "port": port if port >= 0 else None,
        "duplicate_packets_per_s": rates["dupl_pkts"], "rdma_sends_per_s": rates["rdma_sends"],
        "rdma_recvs_per_s": rates["rdma_recvs"],
    }, {M.TX_PACKETS_PER_S: rates["send_pkts"], M.RX_PACKETS_PER_S: rates["recv_pkts"]})


def read_rdma_resource(kind: str, keys: tuple[str, ...]) -> Callable[[Reader, dict, str], str]:
    """Protection domains, queue pairs and memory regions: keyed like the legacy tool keys them."""
    def read(r: Reader, node: dict, where: str) -> str:
        host = r.host_of(node)
        attrs: dict[str, Any] = {"kind": kind}
        for name in ("pid", "pdn", "qpn", "rqpn", "port", "lkey", "rkey", "mrlen"):
            if name in node:
                attrs[name] = v.integer(node[name], f"{where}.{name}", minimum=-1)
        if "dev" in node:
            attrs["device"] = v.text(node["dev"], f"{where}.dev")
        if "pid" in attrs and attrs["pid"] < -1:
            raise v.LegacyValueError(f"{where}.pid", f"{attrs['pid']} is not a valid pid")
        ident = [attrs.get(k, "unknown") for k in keys]
        return r.add(T.RDMA_RESOURCE, host, [kind, *ident], attrs, details=node.get("details"))
    return read


def read_opaque(r: Reader, node: dict, where: str) -> str:
    """A type this version does not know: kept whole (secrets redacted), never an error."""
    host = r.host_of(node)
    legacy_type = str(node.get("entity_type") or "unknown")
    fields = {k: val for k, val in node.items() if k not in _BASE_FIELDS}
    return r.add(T.OPAQUE, host, [legacy_type, digest(fields)],
                 {"legacy_type": legacy_type, "fields": redact_values(fields)}, details=node.get("details"))


READERS: dict[str, Callable[[Reader, dict, str], str]] = {
    "ProcessEntity": read_process,
    "ThreadEntity": read_thread,
    "SocketEntity": read_socket,
    "NumaEntity": read_numa,
    "NumaSetEntity": read_numa_set,
    "NPUEntity": read_device(T.NPU),
    "GPUEntity": read_device(T.GPU),
    "ContainerEntity": read_container,
    "PodEntity": read_pod,
    "SharedMemoryEntity": read_shared_memory,
    "RdmaDevice": read_rdma_device,
    "RdmaStatisticPerSecond": read_rdma_port,
    "RdmaProtectionDomain": read_rdma_resource("pd", ("pid", "device", "pdn")),
    "RdmaLocalQueuePair": read_rdma_resource("qp", ("pid", "qpn")),
    "RdmaQueuePairEndpoint": read_rdma_resource("qp", ("qpn",)),
    "RdmaMemoryRegion": read_rdma_resource("mr", ("pid", "pdn", "lkey")),
}
