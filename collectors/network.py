"""Network: NIC throughput, drops and errors against link speed, the host's TCP retransmit rate,
and the state of every TCP connection (RTT, retransmits, bytes) with its owning process.

/proc/net/dev and /proc/net/snmp are read every interval (two small files). The connection
table is read at the start and the end of the window only: one sock_diag dump (the kernel's own
`ss` interface, a few ms per thousand sockets) plus the shared fd walk that names the owners.
Without sock_diag it falls back to running `ss -tanieH` twice, a process spawn each.
All of it is per network namespace: run in the host namespace to see the host's NICs.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from witty_profiler.collectors.base import Collector, register
from witty_profiler.collectors.lib import fdscan, sockdiag
from witty_profiler.collectors.lib.procfs import read_text
from witty_profiler.collectors.lib.sampling import Series, SeriesTable, ratio_metrics, window_metrics, window_stats
from witty_profiler.topology import Graph
from witty_profiler.topology.ids import entity_id, numa_id, pci_address, process_id
from witty_profiler.topology.vocabulary import E, M, T

MAX_CONNECTIONS = 2000  # above this, keep the connections that moved the most bytes
NET_DEV_FIELDS = ("rx_bytes", "rx_packets", "rx_errors", "rx_drops", None, None, None, None,
                  "tx_bytes", "tx_packets", "tx_errors", "tx_drops")
NIC_RATES = {"rx_bytes": M.RX_BYTES_PER_S, "tx_bytes": M.TX_BYTES_PER_S, "rx_packets": M.RX_PACKETS_PER_S,
             "tx_packets": M.TX_PACKETS_PER_S, "rx_drops": M.RX_DROPS_PER_S, "tx_drops": M.TX_DROPS_PER_S,
             "rx_errors": M.RX_ERRORS_PER_S, "tx_errors": M.TX_ERRORS_PER_S}
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


# -- pure parsers -------------------------------------------------------------------------
def parse_net_dev(text: str) -> dict[str, dict[str, int]]:
    """/proc/net/dev -> {interface: {rx_bytes, rx_packets, rx_errors, rx_drops, tx_...}}."""
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        values = rest.split()
        out[name.strip()] = {k: int(v) for k, v in zip(NET_DEV_FIELDS, values) if k}
    return out


def parse_snmp(text: str) -> dict[str, dict[str, int]]:
    """/proc/net/snmp: pairs of lines 'Proto: names...' / 'Proto: values...' -> {proto: {name: value}}."""
    out: dict[str, dict[str, int]] = {}
    header: dict[str, list[str]] = {}
    for line in text.splitlines():
        proto, _, rest = line.partition(":")
        fields = rest.split()
        if proto not in header:
            header[proto] = fields
        else:
            out[proto] = {k: int(v) for k, v in zip(header.pop(proto), fields)}
    return out


def link_util_pct(rx_bytes_per_s: float, tx_bytes_per_s: float, speed_mbps: float) -> float:
    return max(rx_bytes_per_s, tx_bytes_per_s) * 8 / (speed_mbps * 1e6) * 100


# -- sysfs --------------------------------------------------------------------------------
def nic_attrs(sys_root: Path, name: str) -> dict:
    """What sysfs says about an interface: virtual or not, speed, PCI address and NUMA node."""
    base = sys_root / "class" / "net" / name
    attrs: dict = {"name": name}
    real = os.path.realpath(base)
    attrs["virtual"] = "/devices/virtual/" in real
    for key in ("operstate", "mtu"):
        text = read_text(str(base / key))
        if text is not None:
            attrs[key] = int(text) if key == "mtu" else text.strip()
    speed = read_text(str(base / "speed"))  # EINVAL while the link is down; -1 when unknown
    if speed and speed.strip().lstrip("-").isdigit() and int(speed) > 0:
        attrs["speed_mbps"] = int(speed)
    bdfs = [part for part in Path(real).parts if _BDF.match(part)]
    if bdfs:
        attrs["pci_address"] = pci_address(bdfs[-1])
        node = read_text(str(sys_root / "bus" / "pci" / "devices" / bdfs[-1] / "numa_node"))
        if node and node.strip().lstrip("-").isdigit() and int(node) >= 0:
            attrs["numa_node"] = int(node)
    return attrs


# -- TCP connections ----------------------------------------------------------------------
def connection_metrics(end: sockdiag.TcpSock, start: sockdiag.TcpSock | None) -> dict[str, int | None]:
    """RTT at the end; retransmits and bytes over the window (all of them for a connection opened in it)."""
    def delta(name: str) -> int | None:
        now = getattr(end, name)
        if now is None:
            return None
        before = getattr(start, name) if start is not None else 0
        return now - before if before is not None and now >= before else None

    return {M.RTT_US: end.rtt_us, M.RTT_VAR_US: end.rtt_var_us, M.RETRANS_TOTAL: delta("total_retrans"),
            M.BYTES_SENT_TOTAL: delta("bytes_acked"), M.BYTES_RECEIVED_TOTAL: delta("bytes_received")}


def add_connections(graph: Graph, host: str, end: list[sockdiag.TcpSock], start: list[sockdiag.TcpSock],
                    owners: dict[int, dict[int, list[int]]], scope: set[int] | None) -> int:
    """tcp_connection entities with owns_connection edges; returns how many were left out by the cap."""
    before = {s.cookie: s for s in start if s.cookie}
    local_hosts = {s.local[0] for s in end}
    kept = []
    for sock in end:
        if sock.state in ("LISTEN", "TIME-WAIT", "UNCONN"):
            continue
        pids = sorted(owners.get(sock.inode, {})) or ([sock.pid] if sock.pid else [])
        if scope is not None and not set(pids) & scope:
            continue
        metrics = connection_metrics(sock, before.get(sock.cookie) if sock.cookie else None)
        kept.append((sock, pids, metrics))
    kept.sort(key=lambda k: -((k[2][M.BYTES_SENT_TOTAL] or 0) + (k[2][M.BYTES_RECEIVED_TOTAL] or 0)))
    for sock, pids, metrics in kept[:MAX_CONNECTIONS]:
        local, remote = sockdiag.endpoint(sock.local), sockdiag.endpoint(sock.remote)
        cid = entity_id(T.TCP_CONNECTION, host, local, remote)
        attrs = {"local": local, "remote": remote, "state": sock.state,
                 "remote_is_local": sockdiag.is_local_address(sock.remote[0]) or sock.remote[0] in local_hosts}
        if pids:
            attrs["pid"] = pids[0]
        graph.entity_of(T.TCP_CONNECTION, cid, attrs, {k: v for k, v in metrics.items() if v is not None})
        for pid in pids:
            graph.entity_of(T.PROCESS, process_id(host, pid), {"pid": pid})
            graph.edge_of(E.OWNS_CONNECTION, process_id(host, pid), cid)
    return max(0, len(kept) - MAX_CONNECTIONS)


@register
class NetworkCollector(Collector):
    name = "network"
    reads = "/proc/net/dev, /proc/net/snmp, /sys/class/net, sock_diag TCP info (ss -ti)"
    needs = "any user; root names every connection's owner"

    def start(self) -> None:
        self.nics = SeriesTable()
        self.tcp = SeriesTable()
        self._read_counters()
        self._start_socks, self._start_problem = sockdiag.shared_tcp_table(self.ctx.cache, "start")

    def sample(self) -> None:
        self._read_counters()

    def _read_counters(self) -> None:
        t = time.monotonic()
        dev = read_text(f"{self.ctx.proc}/net/dev")
        for name, counters in parse_net_dev(dev or "").items():
            self.nics.add_many(name, t, counters)
        snmp = parse_snmp(read_text(f"{self.ctx.proc}/net/snmp") or "").get("Tcp", {})
        self.tcp.add_many("tcp", t, snmp, keep=lambda k: k in ("OutSegs", "RetransSegs"))

    def finish(self) -> Graph:
        self._read_counters()
        graph = self.fragment()
        nics = self.nics.prefixes()
        if not nics:
            return self.unavailable(f"{self.ctx.proc}/net/dev is not readable")
        for name in nics:
            self._add_nic(graph, name)
        self._add_host_tcp(graph)
        self._add_connections(graph)
        return graph

    def _add_nic(self, graph: Graph, name: str) -> None:
        attrs = nic_attrs(self.ctx.sys, name)
        metrics: dict[str, float] = {}
        for counter, metric in NIC_RATES.items():
            series = self.nics.get((name, counter))
            if series is not None:
                metrics.update(window_metrics(metric, series))
        speed = attrs.pop("speed_mbps", None)
        if speed:
            metrics[M.SPEED_MBPS] = speed
            rx, tx = self.nics.get((name, "rx_bytes")), self.nics.get((name, "tx_bytes"))
            if rx is not None and tx is not None and rx.rate() is not None and tx.rate() is not None:
                metrics.update(_util_stats(rx, tx, speed))
        nic = graph.entity_of(T.NIC, entity_id(T.NIC, self.ctx.host, name), attrs, metrics)
        if "numa_node" in attrs:
            graph.edge_of(E.LOCAL_TO, nic.id, numa_id(self.ctx.host, attrs["numa_node"]))

    def _add_host_tcp(self, graph: Graph) -> None:
        out, retrans = self.tcp.get(("tcp", "OutSegs")), self.tcp.get(("tcp", "RetransSegs"))
        if out is None or retrans is None:
            self.partial(f"{self.ctx.proc}/net/snmp has no Tcp counters: host retransmit rate unknown")
            return
        metrics = {**window_metrics(M.TCP_OUT_SEGS_PER_S, out), **window_metrics(M.TCP_RETRANS_SEGS_PER_S, retrans),
                   **ratio_metrics(M.TCP_RETRANS_PCT, retrans, out)}
        self.add_host(graph, metrics)

    def _add_connections(self, graph: Graph) -> None:
        end, problem = sockdiag.shared_tcp_table(self.ctx.cache, "end")
        if end is None:
            self.partial(problem or "TCP connection table unavailable")
            return
        fds = fdscan.shared_scan(self.ctx.proc, self.ctx.cache, "end")
        dropped = add_connections(graph, self.ctx.host, end, self._start_socks or [], fds.inodes("socket"),
                                  self.ctx.pids)
        if dropped:
            self.partial(f"{dropped} TCP connections beyond the {MAX_CONNECTIONS} busiest left out")
        if fds.denied:
            self.partial(f"owners of sockets in {fds.denied} processes unknown (run as root to see them)")


def _util_stats(rx: Series, tx: Series, speed_mbps: float) -> dict[str, float]:
    per = [link_util_pct(r, t, speed_mbps) for r, t in zip(rx.interval_rates(), tx.interval_rates())]
    return window_stats(M.LINK_UTIL_PCT, link_util_pct(rx.rate() or 0.0, tx.rate() or 0.0, speed_mbps), per)
