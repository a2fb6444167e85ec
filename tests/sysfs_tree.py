"""Build sysfs trees with the real layout for hardware this machine lacks.

Devices live under sys/devices/pciDDDD:BB/<root port>/<bridges>/<device>, and
sys/bus/pci/devices/<address> is a relative symlink to them, as on a real host; file names and
value formats are the kernel's (class '0x030200', current_link_speed '16.0 GT/s PCIe',
numa_node '-1', local_cpus as 32-bit hex words).
"""

from __future__ import annotations

import os
from pathlib import Path


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def add_pci(sys_root: Path, root_complex: str, chain: list[str], address: str, *, cls: str,
            vendor: str = "0x10de", device: str = "0x2330", numa: int = -1, cpulist: str | None = None,
            cpumask: str | None = None, speed: str | None = "16.0 GT/s PCIe", max_speed: str | None = "16.0 GT/s PCIe",
            width: int | None = 16, max_width: int | None = 16, driver: str | None = None) -> Path:
    """Create one PCI function below `root_complex` (e.g. 'pci0000:17') behind the bridges in `chain`."""
    d = sys_root / "devices" / root_complex
    for bridge in chain:
        d = d / bridge
        if not (d / "class").exists():
            write(d / "class", "0x060400")
            write(d / "numa_node", str(numa))
            _link(sys_root, d)
    d = d / address
    write(d / "class", cls)
    write(d / "vendor", vendor)
    write(d / "device", device)
    write(d / "subsystem_vendor", vendor)
    write(d / "subsystem_device", "0x16c1")
    write(d / "numa_node", str(numa))
    if cpulist is not None:
        write(d / "local_cpulist", cpulist)
    if cpumask is not None:
        write(d / "local_cpus", cpumask)
    for name, value in (("current_link_speed", speed), ("max_link_speed", max_speed),
                        ("current_link_width", width), ("max_link_width", max_width)):
        if value is not None:
            write(d / name, str(value))
    if driver:
        drv = sys_root / "bus" / "pci" / "drivers" / driver
        drv.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(drv, d), d / "driver")
    _link(sys_root, d)
    return d


def _link(sys_root: Path, device: Path) -> None:
    bus = sys_root / "bus" / "pci" / "devices"
    bus.mkdir(parents=True, exist_ok=True)
    link = bus / device.name
    if not link.exists():
        os.symlink(os.path.relpath(device, bus), link)


def add_netdev(device: Path, ifname: str) -> None:
    write(device / "net" / ifname / "address", "b8:3f:d2:aa:bb:cc")
