"""PCI collector: sysfs parsing helpers, a recorded two-socket tree, and this host's real bus."""

from __future__ import annotations

from pathlib import Path

import pytest

from witty_profiler.collectors.base import Context
from witty_profiler.collectors.pci import (
    PciCollector,
    link_degraded,
    parse_link_speed,
    parse_link_width,
    parse_numa_node,
    pcie_generation,
    pcie_link_type,
    read_device,
)

from graph_checks import assert_known_names
from sysfs_tree import add_netdev, add_pci


@pytest.mark.parametrize("text,gts", [("8.0 GT/s PCIe", 8.0), ("16.0 GT/s PCIe", 16.0), ("2.5 GT/s", 2.5),
                                      ("5 GT/s", 5.0), ("Unknown", None), ("", None), (None, None)])
def test_link_speed(text, gts):
    assert parse_link_speed(text) == gts


def test_small_parsers():
    assert parse_link_width("16") == 16 and parse_link_width("0") is None and parse_link_width(None) is None
    assert pcie_generation(32.0) == 5 and pcie_generation(None) is None
    assert parse_numa_node("-1") is None and parse_numa_node("3") == 3


def test_link_degraded_rules():
    base = {"link_speed_gts": 16.0, "link_speed_max_gts": 16.0, "link_width": 16, "link_width_max": 16}
    assert link_degraded(base) is False
    assert link_degraded({**base, "link_width": 8}) is True
    assert link_degraded({**base, "link_speed_gts": 2.5}) is True
    assert link_degraded({k: None for k in base}) is None


@pytest.fixture()
def two_socket(tmp_path: Path) -> Path:
    """Socket 0: a GPU and a ConnectX NIC behind one switch; socket 1: a GPU straight on a root port."""
    sys_root = tmp_path / "sys"
    sw = ["0000:17:01.0", "0000:18:00.0"]
    add_pci(sys_root, "pci0000:17", sw + ["0000:19:00.0"], "0000:1a:00.0", cls="0x030200", numa=0,
            cpumask="00000000,0000ffff", speed="16.0 GT/s PCIe", max_speed="32.0 GT/s PCIe", driver="nvidia")
    nic = add_pci(sys_root, "pci0000:17", sw + ["0000:19:04.0"], "0000:1b:00.0", cls="0x020700", vendor="0x15b3",
                  device="0x101b", numa=0, cpulist="0-15", speed="16.0 GT/s PCIe", width=8, max_width=16)
    add_netdev(nic, "ibp27s0")
    (nic / "infiniband" / "mlx5_0").mkdir(parents=True)
    add_pci(sys_root, "pci0000:9a", ["0000:9a:01.0"], "0000:9b:00.0", cls="0x030200", numa=1, cpulist="16-31")
    add_pci(sys_root, "pci0000:00", [], "0000:00:1f.0", cls="0x060100", numa=-1, cpulist="0-31",
            speed="Unknown", max_speed="Unknown", width=0, max_width=0)
    return sys_root


def test_read_device_both_cpu_formats(two_socket):
    gpu = read_device(two_socket, "00000000:1A:00.0")  # NVML's 8-digit domain, upper case
    assert gpu["numa_node"] == 0 and gpu["local_cpus"] == list(range(16))
    assert gpu["link_speed_gts"] == 16.0 and gpu["link_speed_max_gts"] == 32.0 and gpu["link_degraded"] is True
    assert gpu["class_name"] == "3D controller" and gpu["driver"] == "nvidia"
    nic = read_device(two_socket, "0000:1b:00.0")
    assert nic["netdevs"] == ["ibp27s0"] and nic["rdma_devices"] == ["mlx5_0"] and nic["link_width"] == 8
    assert read_device(two_socket, "0000:ff:00.0") is None


def test_link_types_on_the_tree(two_socket):
    assert pcie_link_type(two_socket, "0000:1a:00.0", "0000:1b:00.0") == "PIX"
    assert pcie_link_type(two_socket, "0000:1a:00.0", "0000:9b:00.0", 0, 1) == "SYS"
    assert pcie_link_type(two_socket, "0000:1a:00.0", "0000:9b:00.0", 0, 0) == "NODE"
    assert pcie_link_type(two_socket, "0000:1a:00.0", "0000:ff:00.0") is None


def test_collector_on_recorded_tree(two_socket):
    c = PciCollector(Context(host="n1", sys=two_socket))
    c.start()
    c.sample()
    g = c.finish()
    assert c.status.status == "ok"
    assert_known_names(g)
    gpu = g.entity("pci_device:n1:0000:1a:00.0")
    assert gpu.metrics == {"link_speed_gts": 16.0, "link_speed_max_gts": 32.0, "link_width": 16, "link_width_max": 16}
    assert gpu.attrs["link_degraded"] is True and gpu.attrs["local_cpus"] == "0-15"
    assert gpu.attrs["parent"] == "0000:19:00.0"
    assert g.entity("pci_device:n1:0000:1b:00.0").attrs["link_degraded"] is True  # x8 of x16
    lpc = g.entity("pci_device:n1:0000:00:1f.0")
    assert "link_degraded" not in lpc.attrs and "link_speed_gts" not in lpc.metrics and lpc.attrs["numa_node"] is None
    targets = {e.source: e.target for e in g.edges("local_to")}
    assert targets["pci_device:n1:0000:9b:00.0"] == "numa_node:n1:1"
    assert "pci_device:n1:0000:00:1f.0" not in targets


@pytest.mark.live
def test_collector_on_this_host():
    c = PciCollector(Context(host="me"))
    g = c.finish()
    if c.status.status == "unavailable":
        pytest.skip(c.status.reason)
    devices = g.entities("pci_device")
    assert devices and all(d.attrs["class"].startswith("0x") for d in devices)
    assert len(devices) == len(list(Path("/sys/bus/pci/devices").iterdir()))


def test_collector_without_pci(tmp_path):
    c = PciCollector(Context(host="n1", sys=tmp_path))
    assert len(c.finish()) == 0
    assert c.status.status == "unavailable" and "bus/pci/devices" in c.status.reason
