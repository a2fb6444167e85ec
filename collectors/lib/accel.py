"""What the GPU and NPU collectors share: a device's place on the host (NUMA node, local CPUs, PCI function, nearest NICs) read from sysfs."""

from __future__ import annotations

from pathlib import Path

from witty_profiler.collectors.pci import is_nic, pcie_link_type, read_device, scan
from witty_profiler.topology import Graph
from witty_profiler.topology.cpulist import format_cpulist
from witty_profiler.topology.ids import entity_id, numa_id, pci_address
from witty_profiler.topology.vocabulary import E, T

# closeness on the PCIe tree, nearest first (nvidia-smi topo terms)
LINK_RANK = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}


def place_device(g: Graph, sys_root: Path, host: str, eid: str, address: str | None) -> dict:
    """Attrs numa_node and local_cpus of a device from its PCI function; adds local_to and pci_function."""
    if not address:
        return {}
    info = read_device(sys_root, address)
    if info is None:
        return {}
    g.edge_of(E.PCI_FUNCTION, eid, entity_id(T.PCI_DEVICE, host, info["address"]))
    if info["numa_node"] is not None:
        g.edge_of(E.LOCAL_TO, eid, numa_id(host, info["numa_node"]))
    attrs = {"numa_node": info["numa_node"], "local_cpus": format_cpulist(info["local_cpus"])}
    if info["link_degraded"] is not None:
        attrs["pcie_link_degraded"] = info["link_degraded"]
    return attrs


def host_nics(sys_root: Path, cache: dict) -> list[dict]:
    """PCI network functions with a netdev or an RDMA device."""
    return [i for i in scan(sys_root, cache).values() if is_nic(i)]


def link_nearest_nics(g: Graph, sys_root: Path, host: str, eid: str, address: str | None,
                      numa: int | None, nics: list[dict]) -> None:
    """near_nic edges from a device to the NICs closest to it on the PCIe tree (ties all kept)."""
    if not address:
        return
    ranked = []
    for nic in nics:
        kind = pcie_link_type(sys_root, pci_address(address), nic["address"], numa, nic["numa_node"])
        if kind:
            ranked.append((LINK_RANK[kind], kind, nic))
    if not ranked:
        return
    best = min(r for r, _, _ in ranked)
    for rank, kind, nic in ranked:
        if rank != best:
            continue
        name = nic["netdevs"][0] if nic["netdevs"] else nic["rdma_devices"][0]
        target = entity_id(T.NIC, host, name)
        g.entity_of(T.NIC, target, {"name": name, "pci_address": nic["address"], "numa_node": nic["numa_node"]})
        g.edge_of(E.NEAR_NIC, eid, target, {"link_type": kind, "rdma_devices": nic["rdma_devices"]})
