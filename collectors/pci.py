"""PCI devices from /sys/bus/pci/devices: class, ids, NUMA node, local CPUs, PCIe link state.

The parsing helpers here are pure functions of sysfs text and are shared by the gpu, npu and
rdma collectors, which need the same facts (NUMA node, local CPUs, position on the PCIe tree)
for the devices they find by their own means.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from witty_profiler.collectors.base import Collector, register
from witty_profiler.topology import Graph
from witty_profiler.topology.cpulist import format_cpulist, parse_cpulist, parse_cpumask
from witty_profiler.topology.ids import entity_id, numa_id, pci_address
from witty_profiler.topology.vocabulary import E, M, T

# sysfs class code (first two bytes) -> what a person calls it
CLASS_NAMES = {
    "0100": "SCSI controller", "0101": "IDE controller", "0104": "RAID controller", "0106": "SATA controller",
    "0107": "SAS controller", "0108": "NVMe controller", "0200": "Ethernet controller",
    "0207": "InfiniBand controller", "0280": "Network controller", "0300": "VGA controller",
    "0302": "3D controller", "0380": "Display controller", "0600": "Host bridge", "0604": "PCI bridge",
    "0680": "Bridge", "0880": "System peripheral", "0c03": "USB controller", "1200": "Processing accelerator",
}

_BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")

# PCIe generation by per-lane transfer rate in GT/s
_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def read_text(path: Path | str) -> str | None:
    try:  # os-level reads: a PCI scan reads thousands of small files, io.open's layers triple the cost
        fd = os.open(path, os.O_RDONLY)
        try:
            return os.read(fd, 65536).decode(errors="replace").strip()
        finally:
            os.close(fd)
    except OSError:  # absent attribute, or a device that went away between listing and reading
        return None


def parse_link_speed(text: str | None) -> float | None:
    """'8.0 GT/s PCIe' (kernel >= 4.20), '8 GT/s', '2.5 GT/s' -> GT/s; 'Unknown' or absent -> None."""
    if not text:
        return None
    m = re.match(r"\s*([0-9.]+)\s*GT/s", text)
    return float(m.group(1)) if m else None


def parse_link_width(text: str | None) -> int | None:
    """'16' -> 16; '0' (no link trained, or a virtual function) and absent -> None."""
    try:
        width = int(text or "")
    except ValueError:
        return None
    return width or None


def pcie_generation(gts: float | None) -> int | None:
    return _GEN_BY_GTS.get(gts) if gts else None


def parse_numa_node(text: str | None) -> int | None:
    """sysfs numa_node: -1 means the firmware did not say (single-node host or missing ACPI _PXM)."""
    try:
        node = int(text or "")
    except ValueError:
        return None
    return node if node >= 0 else None


def device_dir(sys_root: Path, address: str) -> Path:
    return sys_root / "bus" / "pci" / "devices" / pci_address(address)


def upstream_chain(sys_root: Path, address: str) -> tuple[str, list[str]] | None:
    """(root complex, [bridges from the root port down to the device's parent]) from the sysfs path.

    /sys/bus/pci/devices/X links to /sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/X: the
    path names the host bridge (``pci0000:3a``) and every bridge above the device.
    """
    link = device_dir(sys_root, address)
    try:
        real = link.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    parts = real.parts
    roots = [i for i, p in enumerate(parts) if p.startswith("pci") and ":" in p]
    if not roots:
        return None
    start = roots[-1]
    chain = [p for p in parts[start + 1:] if _BDF.match(p)]
    return parts[start], [pci_address(p) for p in chain[:-1]]


def pcie_link_type(sys_root: Path, a: str, b: str, numa_a: int | None = None,
                   numa_b: int | None = None) -> str | None:
    """How two PCI devices reach each other, in nvidia-smi topo terms.

    PIX: through at most one PCIe switch; PXB: through several switches without the host
    bridge; PHB: through a host bridge (the CPU); NODE: between host bridges of one NUMA node;
    SYS: across the SMP interconnect between NUMA nodes.
    """
    ca, cb = upstream_chain(sys_root, a), upstream_chain(sys_root, b)
    if ca is None or cb is None:
        return None
    (root_a, chain_a), (root_b, chain_b) = ca, cb
    if root_a != root_b:
        return "NODE" if numa_a == numa_b else "SYS"
    common = 0
    while common < min(len(chain_a), len(chain_b)) and chain_a[common] == chain_b[common]:
        common += 1
    if common == 0:
        return "PHB"
    # below the deepest shared bridge, each side passes at most one downstream port: one switch
    below = (len(chain_a) - common) + (len(chain_b) - common)
    return "PIX" if below <= 2 else "PXB"


def read_device(sys_root: Path, address: str) -> dict | None:
    """Everything sysfs tells about one PCI function, as plain data (None if it does not exist)."""
    d = device_dir(sys_root, address)
    prefix = f"{d}/"

    def attr(name: str) -> str | None:
        return read_text(prefix + name)

    cls = attr("class")
    if cls is None:
        return None
    local = attr("local_cpulist")
    cpus = parse_cpulist(local) if local is not None else parse_cpumask(attr("local_cpus"))
    driver = d / "driver"
    info = {
        "address": pci_address(address),
        "class": cls.lower(),
        "vendor": attr("vendor"),
        "device": attr("device"),
        "subsystem_vendor": attr("subsystem_vendor"),
        "subsystem_device": attr("subsystem_device"),
        "driver": driver.resolve().name if driver.is_symlink() else None,
        "numa_node": parse_numa_node(attr("numa_node")),
        "local_cpus": cpus,
        M.LINK_SPEED_GTS: parse_link_speed(attr("current_link_speed")),
        M.LINK_SPEED_MAX_GTS: parse_link_speed(attr("max_link_speed")),
        M.LINK_WIDTH: parse_link_width(attr("current_link_width")),
        M.LINK_WIDTH_MAX: parse_link_width(attr("max_link_width")),
        "netdevs": sorted(p.name for p in (d / "net").iterdir()) if (d / "net").is_dir() else [],
        "rdma_devices": sorted(p.name for p in (d / "infiniband").iterdir()) if (d / "infiniband").is_dir() else [],
    }
    info["class_name"] = CLASS_NAMES.get(info["class"][2:6], "other")
    info["link_degraded"] = link_degraded(info)
    return info


def link_degraded(info: dict) -> bool | None:
    """True when the link trained below what both ends support (speed or width); None if unknown."""
    pairs = [(info[M.LINK_SPEED_GTS], info[M.LINK_SPEED_MAX_GTS]), (info[M.LINK_WIDTH], info[M.LINK_WIDTH_MAX])]
    known = [(cur, top) for cur, top in pairs if cur is not None and top is not None]
    if not known:
        return None
    return any(cur < top for cur, top in known)


def list_devices(sys_root: Path) -> list[str]:
    base = sys_root / "bus" / "pci" / "devices"
    try:
        return sorted(p.name for p in base.iterdir())
    except OSError:
        return []


def scan(sys_root: Path, cache: dict) -> dict[str, dict]:
    """Every PCI function of the host by address, read once per round and shared between collectors."""
    key = f"pci.scan:{sys_root}"
    if key not in cache:
        infos = (read_device(sys_root, a) for a in list_devices(sys_root))
        cache[key] = {i["address"]: i for i in infos if i is not None}
    return cache[key]


def is_nic(info: dict) -> bool:
    return info["class"].startswith("0x02") and bool(info["netdevs"] or info["rdma_devices"])


@register
class PciCollector(Collector):
    """Every PCI function with its NUMA node and link; the link state is read at the end of the window."""

    name = "pci"
    reads = "/sys/bus/pci/devices (class, ids, numa_node, local_cpulist, link speed and width)"
    needs = "any user"

    def finish(self) -> Graph:
        devices = scan(self.ctx.sys, self.ctx.cache)
        if not devices:
            return self.unavailable(f"no PCI devices under {self.ctx.sys}/bus/pci/devices (no PCI bus, or sysfs not mounted)")
        g = self.fragment()
        host = self.ctx.host
        for address, info in devices.items():
            eid = entity_id(T.PCI_DEVICE, host, info["address"])
            attrs = {k: info[k] for k in ("address", "class", "class_name", "vendor", "device",
                                          "subsystem_vendor", "subsystem_device", "driver", "numa_node")}
            attrs["local_cpus"] = format_cpulist(info["local_cpus"])
            if info["netdevs"]:
                attrs["netdevs"] = info["netdevs"]
            if info["rdma_devices"]:
                attrs["rdma_devices"] = info["rdma_devices"]
            if info["link_degraded"] is not None:
                attrs["link_degraded"] = info["link_degraded"]
            chain = upstream_chain(self.ctx.sys, address)
            if chain and chain[1]:
                attrs["parent"] = chain[1][-1]
            metrics = {k: info[k] for k in (M.LINK_SPEED_GTS, M.LINK_SPEED_MAX_GTS, M.LINK_WIDTH, M.LINK_WIDTH_MAX)
                       if info[k] is not None}
            g.entity_of(T.PCI_DEVICE, eid, attrs, metrics)
            if info["numa_node"] is not None:
                g.edge_of(E.LOCAL_TO, eid, numa_id(host, info["numa_node"]))
        return g
