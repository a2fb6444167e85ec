"""InfiniBand and RoCE ports from /sys/class/infiniband: state, rate, traffic and error rates.

Layout (per port): /sys/class/infiniband/<dev>/ports/<n>/{state, phys_state, rate, link_layer,
counters/*, hw_counters/*, gid_attrs/ndevs/<i>}; <dev>/device is the PCI function, whose net/
directory names the netdev. port_rcv_data and port_xmit_data count 4-byte words, not bytes.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from witty_profiler.collectors.base import Collector, register
from witty_profiler.collectors.pci import read_device, read_text
from witty_profiler.topology import Graph
from witty_profiler.topology.ids import entity_id, numa_id, pci_address
from witty_profiler.topology.npuport import add_link_speed
from witty_profiler.topology.vocabulary import E, M, T

# IBTA PortCounters that only move when something is wrong on the link or in the fabric
ERROR_COUNTERS = (
    "symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors", "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors", "port_xmit_discards", "port_xmit_constraint_errors",
    "port_rcv_constraint_errors", "local_link_integrity_errors", "excessive_buffer_overrun_errors", "VL15_dropped",
)
# mlx5 hw_counters that mean a packet was lost or a request had to be repeated
RETRANS_COUNTERS = (
    "out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "rnr_nak_retry_err", "implied_nak_seq_err",
    "duplicate_request", "req_cqe_error", "resp_cqe_error", "resp_local_length_error", "rx_icrc_encapsulated",
)
# congestion signals on RoCE (ECN marks and congestion notification packets): rates, not errors
CONGESTION_COUNTERS = ("np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled")

clock = time.monotonic  # module attribute so that tests replaying recorded counters can set the time


def parse_rate(text: str | None) -> float | None:
    """'200 Gb/sec (4X HDR)' -> 200.0; '2.5 Gb/sec (1X SDR)' -> 2.5."""
    m = re.match(r"\s*([0-9.]+)\s*Gb/sec", text or "")
    return float(m.group(1)) if m else None


def parse_state(text: str | None) -> str | None:
    """'4: ACTIVE' -> 'ACTIVE'; '5: LinkUp' -> 'LinkUp'."""
    if not text:
        return None
    return text.split(":", 1)[-1].strip()


def read_counters(directory: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    if not directory.is_dir():
        return out
    for f in directory.iterdir():
        value = read_text(f)
        if value is not None and value.isdigit():
            out[f.name] = int(value)
    return out


def read_port(port_dir: Path) -> dict:
    """One port's counters (plain and hw_counters) and when they were read."""
    return {"t": clock(), "counters": read_counters(port_dir / "counters"),
            "hw": read_counters(port_dir / "hw_counters")}


def port_rates(first: dict, last: dict, dt: float) -> dict[str, float]:
    """Rates over the window from two readings of a port; a counter that went backwards (reset) is skipped."""
    def delta(kind: str, name: str) -> int | None:
        a, b = first[kind].get(name), last[kind].get(name)
        return b - a if a is not None and b is not None and b >= a else None

    out: dict[str, float] = {}
    if dt <= 0:
        return out
    for metric, name, scale in ((M.PORT_RCV_BYTES_PER_S, "port_rcv_data", 4), (M.PORT_XMIT_BYTES_PER_S, "port_xmit_data", 4),
                                (M.RX_PACKETS_PER_S, "port_rcv_packets", 1), (M.TX_PACKETS_PER_S, "port_xmit_packets", 1)):
        d = delta("counters", name)
        if d is not None:
            out[metric] = d * scale / dt
    errors = [d for n in ERROR_COUNTERS if (d := delta("counters", n)) is not None]
    if errors:
        out[M.PORT_ERRORS_PER_S] = sum(errors) / dt
    retrans = [d for n in RETRANS_COUNTERS if (d := delta("hw", n)) is not None]
    if retrans:
        out[M.PORT_RETRANS_PER_S] = sum(retrans) / dt
    # mlx5: the notification point sends a CNP for ECN-marked packets it receives; the reaction
    # point handles the CNPs that tell it to slow down (the same rates hccn_tool gives NPU ports)
    for metric, name in ((M.CNP_TX_PACKETS_PER_S, "np_cnp_sent"), (M.CNP_RX_PACKETS_PER_S, "rp_cnp_handled")):
        d = delta("hw", name)
        if d is not None:
            out[metric] = d / dt
    return out


def counter_deltas(first: dict, last: dict, kind: str, names: tuple[str, ...]) -> dict[str, int]:
    return {n: last[kind][n] - first[kind][n] for n in names
            if n in first[kind] and n in last[kind] and last[kind][n] >= first[kind][n]}


def port_netdev(dev_dir: Path, port_dir: Path) -> str | None:
    """The netdev of a port: RoCE names it in gid_attrs/ndevs, IPoIB and mlx5 in device/net/."""
    ndevs = port_dir / "gid_attrs" / "ndevs"
    if ndevs.is_dir():
        for f in sorted(ndevs.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 0):
            name = read_text(f)
            if name:
                return name
    net = dev_dir / "device" / "net"
    if net.is_dir():
        names = sorted(p.name for p in net.iterdir())
        for name in names:  # a dual-port PCI function lists one netdev per port, by dev_port
            if read_text(net / name / "dev_port") == str(int(port_dir.name) - 1):
                return name
        return names[0] if names else None
    return None


@register
class RdmaCollector(Collector):
    name = "rdma"
    reads = "/sys/class/infiniband ports: state, rate, counters, hw_counters"
    needs = "an RDMA device; any user"

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.base = ctx.sys / "class" / "infiniband"
        self.ports: list[tuple[str, Path]] = []
        self.first: dict[Path, dict] = {}
        self.prev: dict[Path, dict] = {}
        self.peak: dict[Path, dict[str, float]] = {}

    def start(self) -> None:
        if not self.base.is_dir():
            return
        for dev in sorted(self.base.iterdir()):
            ports = dev / "ports"
            if ports.is_dir():
                self.ports += [(dev.name, p) for p in sorted(ports.iterdir())]
        for _, p in self.ports:
            self.first[p] = self.prev[p] = read_port(p)

    def sample(self) -> None:
        for _, p in self.ports:
            now = read_port(p)
            for k, v in port_rates(self.prev[p], now, now["t"] - self.prev[p]["t"]).items():
                peak = self.peak.setdefault(p, {})
                peak[k] = max(peak.get(k, 0.0), v)
            self.prev[p] = now

    def finish(self) -> Graph:
        if not self.base.is_dir():
            return self.unavailable(f"no RDMA devices: {self.base} does not exist (no InfiniBand/RoCE HCA or ib_core not loaded)")
        if not self.first:
            self.start()  # finish without start: a one-shot round: states, no rates
        if not self.ports:
            return self.unavailable(f"no RDMA ports under {self.base}")
        self.sample()
        g = self.fragment()
        host = self.ctx.host
        for dev, p in self.ports:
            dev_dir = self.base / dev
            first, last = self.first[p], self.prev[p]
            rate = parse_rate(read_text(p / "rate"))
            metrics = port_rates(first, last, last["t"] - first["t"])
            for k in (M.PORT_RCV_BYTES_PER_S, M.PORT_XMIT_BYTES_PER_S):
                if k in self.peak.get(p, {}) and k in metrics:
                    metrics[f"{k}_max"] = self.peak[p][k]
            if rate:
                add_link_speed(metrics, rate)
            netdev = port_netdev(dev_dir, p)
            attrs = {"device": dev, "port": int(p.name) if p.name.isdigit() else p.name,
                     "state": parse_state(read_text(p / "state")), "phys_state": parse_state(read_text(p / "phys_state")),
                     "rate": read_text(p / "rate"), "link_layer": read_text(p / "link_layer"), "netdev": netdev,
                     "hca_type": read_text(dev_dir / "hca_type"), "fw_ver": read_text(dev_dir / "fw_ver"),
                     "error_counters_delta": counter_deltas(first, last, "counters", ERROR_COUNTERS),
                     "retrans_counters_delta": counter_deltas(first, last, "hw", RETRANS_COUNTERS),
                     "congestion_counters_delta": counter_deltas(first, last, "hw", CONGESTION_COUNTERS)}
            eid = entity_id(T.RDMA_PORT, host, dev, p.name)
            pci = self._pci(dev_dir)
            if pci:
                attrs["pci_address"] = pci["address"]
                attrs["numa_node"] = pci["numa_node"]
                g.edge_of(E.PCI_FUNCTION, eid, entity_id(T.PCI_DEVICE, host, pci["address"]))
                if pci["numa_node"] is not None:
                    g.edge_of(E.LOCAL_TO, eid, numa_id(host, pci["numa_node"]))
            g.entity_of(T.RDMA_PORT, eid, attrs, metrics)
            if netdev:
                nic = entity_id(T.NIC, host, netdev)
                g.entity_of(T.NIC, nic, {"name": netdev, **({"pci_address": pci["address"]} if pci else {})})
                g.edge_of(E.NETDEV_OF, eid, nic)
        return g

    def _pci(self, dev_dir: Path) -> dict | None:
        try:
            address = (dev_dir / "device").resolve(strict=True).name
        except (OSError, RuntimeError):
            return None
        return read_device(self.ctx.sys, pci_address(address)) if ":" in address else None
