"""RDMA collector on a sysfs tree laid out like a ConnectX-6 host, sampled twice; and on this host (none)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import witty_profiler.collectors.rdma as rdma
from witty_profiler.collectors.base import Context
from witty_profiler.collectors.rdma import RdmaCollector, parse_rate, parse_state, port_rates

from graph_checks import assert_known_names
from sysfs_tree import add_netdev, add_pci, write

IB_COUNTERS = ["VL15_dropped", "excessive_buffer_overrun_errors", "link_downed", "link_error_recovery",
               "local_link_integrity_errors", "multicast_rcv_packets", "multicast_xmit_packets",
               "port_rcv_constraint_errors", "port_rcv_data", "port_rcv_errors", "port_rcv_packets",
               "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_constraint_errors",
               "port_xmit_data", "port_xmit_discards", "port_xmit_packets", "port_xmit_wait", "symbol_error",
               "unicast_rcv_packets", "unicast_xmit_packets"]
HW_COUNTERS = ["duplicate_request", "implied_nak_seq_err", "lifespan", "local_ack_timeout_err", "np_cnp_sent",
               "np_ecn_marked_roce_packets", "out_of_buffer", "out_of_sequence", "packet_seq_err", "req_cqe_error",
               "req_cqe_flush_error", "req_remote_access_errors", "req_remote_invalid_request", "resp_cqe_error",
               "resp_cqe_flush_error", "resp_local_length_error", "resp_remote_access_errors", "rnr_nak_retry_err",
               "rp_cnp_handled", "rp_cnp_ignored", "rx_atomic_requests", "rx_icrc_encapsulated", "rx_read_requests",
               "rx_write_requests"]


def add_hca(sys_root: Path, root: str, chain: list[str], address: str, dev: str, *, numa: int, rate: str,
            link_layer: str, netdev: str, roce: bool) -> Path:
    """A ConnectX-6 (MT4123) PCI function with its mlx5 RDMA device and one port."""
    pci = add_pci(sys_root, root, chain, address, cls="0x020700" if not roce else "0x020000", vendor="0x15b3",
                  device="0x101b", numa=numa, cpulist="24-47" if numa else "0-23", driver="mlx5_core")
    add_netdev(pci, netdev)
    write(pci / "net" / netdev / "dev_port", "0")
    d = pci / "infiniband" / dev
    write(d / "node_type", "1: CA")
    write(d / "hca_type", "MT4123")
    write(d / "fw_ver", "20.31.1014")
    write(d / "board_id", "MT_0000000223")
    os.symlink(os.path.relpath(pci, d), d / "device")
    cls = sys_root / "class" / "infiniband"
    cls.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(d, cls), cls / dev)
    p = d / "ports" / "1"
    write(p / "state", "4: ACTIVE")
    write(p / "phys_state", "5: LinkUp")
    write(p / "rate", rate)
    write(p / "link_layer", link_layer)
    write(p / "lid", "0x0" if roce else "0x1a")
    if roce:
        write(p / "gid_attrs" / "ndevs" / "0", netdev)
        write(p / "gid_attrs" / "types" / "0", "IB/RoCE v1")
    for name in IB_COUNTERS:
        write(p / "counters" / name, "0")
    for name in HW_COUNTERS:
        write(p / "hw_counters" / name, "0")
    return p


def set_counters(port: Path, **values: int) -> None:
    for name, value in values.items():
        sub = "counters" if name in IB_COUNTERS else "hw_counters"
        write(port / sub / name, str(value))


@pytest.fixture()
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(rdma, "clock", lambda: now[0])
    return now


def test_parsers():
    assert parse_rate("200 Gb/sec (4X HDR)") == 200.0
    assert parse_rate("2.5 Gb/sec (1X SDR)") == 2.5
    assert parse_rate("Unknown") is None
    assert parse_state("4: ACTIVE") == "ACTIVE" and parse_state("5: LinkUp") == "LinkUp" and parse_state(None) is None


def test_port_rates_skip_reset_counters():
    a = {"counters": {"port_rcv_data": 100, "port_xmit_data": 50}, "hw": {}}
    b = {"counters": {"port_rcv_data": 350, "port_xmit_data": 10}, "hw": {}}
    assert port_rates(a, b, 2.0) == {"port_rcv_bytes_per_s": 500.0}  # 250 words * 4 / 2 s; xmit went backwards


def test_connectx6_two_samples(tmp_path, clock):
    sys_root = tmp_path / "sys"
    ib = add_hca(sys_root, "pci0000:c0", ["0000:c0:01.1"], "0000:c1:00.0", "mlx5_0", numa=1,
                 rate="200 Gb/sec (4X HDR)", link_layer="InfiniBand", netdev="ibp193s0", roce=False)
    roce = add_hca(sys_root, "pci0000:00", ["0000:00:02.0"], "0000:01:00.0", "mlx5_1", numa=0,
                   rate="100 Gb/sec (4X EDR)", link_layer="Ethernet", netdev="ens1f0np0", roce=True)
    set_counters(ib, port_rcv_data=10_000_000, port_xmit_data=2_000_000, port_rcv_packets=5000, symbol_error=3)
    c = RdmaCollector(Context(host="n1", sys=sys_root))
    c.start()
    # 2 s later: 5e9 words = 20 GB received, i.e. 10 GB/s on a 25 GB/s (200 Gbit/s) link
    clock[0] += 2.0
    set_counters(ib, port_rcv_data=10_000_000 + 5_000_000_000, port_xmit_data=2_000_000 + 250_000_000,
                 port_rcv_packets=5000 + 4_000_000, symbol_error=7, link_downed=1)
    set_counters(roce, port_xmit_data=1_250_000_000, out_of_sequence=40, local_ack_timeout_err=10, np_cnp_sent=6)
    c.sample()
    clock[0] += 2.0  # nothing moves in the second interval
    g = c.finish()
    assert c.status.status == "ok"
    assert_known_names(g)

    port = g.entity("rdma_port:n1:mlx5_0:1")
    m = port.metrics
    assert m["port_rcv_bytes_per_s"] == pytest.approx(20e9 / 4)  # averaged over the 4 s window
    assert m["port_rcv_bytes_per_s_max"] == pytest.approx(20e9 / 2)  # the busy interval
    assert m["port_xmit_bytes_per_s"] == pytest.approx(1e9 / 4)
    assert m["rx_packets_per_s"] == pytest.approx(1e6)
    assert m["rate_gbps"] == 200.0 and m["port_util_pct"] == pytest.approx(20.0)
    assert m["port_errors_per_s"] == pytest.approx(5 / 4)
    assert port.attrs["error_counters_delta"]["symbol_error"] == 4
    assert port.attrs["state"] == "ACTIVE" and port.attrs["link_layer"] == "InfiniBand"
    assert port.attrs["netdev"] == "ibp193s0" and port.attrs["pci_address"] == "0000:c1:00.0"
    assert port.attrs["numa_node"] == 1 and port.attrs["hca_type"] == "MT4123"

    rp = g.entity("rdma_port:n1:mlx5_1:1")
    assert rp.attrs["netdev"] == "ens1f0np0" and rp.attrs["link_layer"] == "Ethernet"
    assert rp.metrics["port_retrans_per_s"] == pytest.approx(50 / 4)
    assert rp.attrs["congestion_counters_delta"]["np_cnp_sent"] == 6
    assert rp.metrics["cnp_tx_packets_per_s"] == pytest.approx(6 / 4) and rp.metrics["cnp_rx_packets_per_s"] == 0
    assert rp.metrics["port_util_pct"] == pytest.approx(5e9 / 4 * 8 / 100e9 * 100)

    edges = {(e.type, e.source): e.target for e in g.edges()}
    assert edges[("netdev_of", "rdma_port:n1:mlx5_0:1")] == "nic:n1:ibp193s0"
    assert edges[("local_to", "rdma_port:n1:mlx5_0:1")] == "numa_node:n1:1"
    assert edges[("pci_function", "rdma_port:n1:mlx5_1:1")] == "pci_device:n1:0000:01:00.0"
    assert g.entity("nic:n1:ens1f0np0").attrs["pci_address"] == "0000:01:00.0"


@pytest.mark.live
def test_no_infiniband_on_this_host():
    c = RdmaCollector(Context(host="me"))
    c.start()
    g = c.finish()
    if Path("/sys/class/infiniband").is_dir():
        pytest.skip("this host has RDMA devices")
    assert len(g) == 0 and c.status.status == "unavailable"
    assert "/sys/class/infiniband does not exist" in c.status.reason
