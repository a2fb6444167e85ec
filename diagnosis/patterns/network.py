"""Layer 4, network between hosts: latency, retransmissions, RDMA ports, NIC capacity."""

from __future__ import annotations

import ipaddress
from typing import Any

from witty_profiler.diagnosis import evidence as ev
from witty_profiler.diagnosis.catalog import Param, Pattern, Threshold, Verdict, clear, not_evaluated, number
from witty_profiler.diagnosis.patterns.cluster import ODD_HOST
from witty_profiler.diagnosis.patterns.traces import SLOW_LINK
from witty_profiler.diagnosis.rules import metric_check, several_metrics_check
from witty_profiler.diagnosis.scope import Scope, num
from witty_profiler.topology import Entity
from witty_profiler.topology.vocabulary import E, M, T


def _address(endpoint: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """'10.0.0.2:443', '[fe80::1]:22' or a bare address -> the IP address."""
    if not isinstance(endpoint, str) or not endpoint:
        return None
    text = endpoint.strip()
    if text.startswith("["):
        text = text[1:].split("]", 1)[0]
    addr = None
    for candidate in (text, text.rsplit(":", 1)[0]):  # bare address, or address:port
        try:
            addr = ipaddress.ip_address(candidate.split("%", 1)[0])
            break
        except ValueError:
            continue
    if addr is None:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
        return addr.ipv4_mapped
    return addr


def _inter_node(scope: Scope, conn: Entity) -> bool:
    """A connection to another machine of the cluster: not loopback, not to this host, and, when no
    workload is named, a private (cluster) address rather than the internet."""
    if conn.attrs.get("remote_is_local") is True:  # the collector knows this host's own addresses
        return False
    remote, local = _address(conn.attrs.get("remote")), _address(conn.attrs.get("local"))
    if remote is None or remote.is_loopback or (local is not None and remote == local):
        return False
    return scope.has_workload or remote.is_private or remote.is_link_local


def _connections(scope: Scope) -> list[Entity]:
    conns = scope.graph.entities(T.TCP_CONNECTION)
    if scope.has_workload:
        owned = {e.target for p in scope.processes for e in scope.query.out_edges(p.id, E.OWNS_CONNECTION)}
        pids = {p.attrs.get("pid") for p in scope.processes}
        conns = [c for c in conns if c.id in owned or c.attrs.get("pid") in pids]
    return conns


def _bytes(conn: Entity) -> float:
    return (num(conn, M.BYTES_SENT_TOTAL) or 0.0) + (num(conn, M.BYTES_RECEIVED_TOTAL) or 0.0)


# -- network.congestion -------------------------------------------------------------------
def _congestion(scope: Scope, t: dict[str, Any]) -> Verdict:
    conns = _connections(scope)
    if not conns:
        return not_evaluated(scope.missing("no TCP connections " + ("of the workload " if scope.has_workload else "")
                                           + "in this graph", "tcp", "net", "socket"))
    busy = [c for c in conns if _inter_node(scope, c) and _bytes(c) >= t["min_bytes"]]
    if not busy:
        return clear(f"{len(conns)} TCP connections seen; none to another node carried >= "
                     f"{number(t['min_bytes'])} bytes in the window")
    return metric_check(scope, busy, t["rtt_us"], M.RTT_US, "inter-node connections with traffic",
                        ("tcp", "net"), "{n:inter-node connections|see} high round-trip times: {names}, RTT "
                        "{worst} (threshold > {limit}).",
                        extra=lambda c: [ev.entity(c.id, m, num(c, m), unit=u) for m, u in
                                         ((M.RETRANS_TOTAL, "segments"), (M.BYTES_SENT_TOTAL, "bytes"))
                                         if num(c, m) is not None])


CONGESTION = Pattern(
    id="network.congestion", layer=4, title="Network congestion (high RTT)",
    why="Collective operations between nodes run at the pace of the slowest link; a round-trip time that "
        "grows under load means queues in switches or NICs, and every all-reduce waits for them.",
    metrics=("tcp_connection.rtt_us", "tcp_connection.bytes_sent_total", "tcp_connection.retrans_total"),
    thresholds=(Threshold("rtt_us", "us", "above", "smoothed RTT of an inter-node TCP connection carrying traffic",
                          critical=100, warning=50),),
    params=(Param("min_bytes", 1048576, "bytes", "ignore connections that carried less than this in the window"),),
    evidence="Each inter-node connection of the workload (or, on the whole host, to a private address) that "
             "carried traffic, with its RTT, retransmissions and bytes.",
    recommendations=(
        "Check switch and NIC queues and ECN/PFC settings on the path; look for oversubscribed uplinks.",
        "Use RDMA (RoCE/InfiniBand) for collectives instead of TCP where the fabric has it.",
        "Tune NCCL/HCCL (NCCL_SOCKET_IFNAME to the fast NIC, more channels) and overlap communication.",
    ),
    check=_congestion)


# -- network.retransmission ---------------------------------------------------------------
def _retransmission(scope: Scope, t: dict[str, Any]) -> Verdict:
    hosts = [h for h in scope.hosts() if num(h, M.TCP_RETRANS_PCT) is not None or
             num(h, M.TCP_OUT_SEGS_PER_S) is not None]
    if not hosts:
        return not_evaluated(scope.missing("no TCP retransmit rate of the host", "net", "tcp", "host"))
    active = [h for h in hosts if (num(h, M.TCP_OUT_SEGS_PER_S) or 0.0) >= t["min_segments_per_s"]
              and num(h, M.TCP_RETRANS_PCT) is not None]
    if not active:
        return clear(f"too little TCP traffic to judge: under {number(t['min_segments_per_s'])} segments/s sent")
    return metric_check(scope, active, t["tcp_retrans_pct"], M.TCP_RETRANS_PCT, "hosts", ("net",),
                        "TCP retransmits {worst} of its segments on {names} (threshold > {limit}).",
                        extra=lambda h: [ev.entity(h.id, m, num(h, m), unit="1/s") for m in
                                         (M.TCP_OUT_SEGS_PER_S, M.TCP_RETRANS_SEGS_PER_S) if num(h, m) is not None])


RETRANSMISSION = Pattern(
    id="network.retransmission", layer=4, title="TCP retransmissions",
    why="Each retransmission stalls a stream for at least a round trip (or a timeout); above 1 % throughput "
        "collapses and collectives over TCP slow down for everyone.",
    metrics=("host.tcp_retrans_pct", "host.tcp_out_segs_per_s", "host.tcp_retrans_segs_per_s"),
    thresholds=(Threshold("tcp_retrans_pct", "%", "above", "retransmitted / sent TCP segments over the window",
                          critical=1, warning=0.1),),
    params=(Param("min_segments_per_s", 100, "1/s", "ignore hosts sending fewer segments than this: too few to judge"),),
    evidence="The host's retransmit share with its segment rates.",
    recommendations=(
        "Look for drops on the path: NIC ring overflows (ethtool -S), switch buffer drops, bad cables/optics.",
        "Check MTU consistency along the path.",
        "Enlarge NIC ring buffers (ethtool -G) and check IRQ affinity of the NIC queues.",
    ),
    check=_retransmission)


# -- network.rdma_bottleneck --------------------------------------------------------------
def _rdma_bottleneck(scope: Scope, t: dict[str, Any]) -> Verdict:
    ports = scope.graph.entities(T.RDMA_PORT)
    if not ports:
        return not_evaluated(scope.missing("no RDMA port in this graph", "rdma", "infiniband"))
    return several_metrics_check(scope, ports, t, "RDMA ports",
                                 ((M.PORT_UTIL_PCT, None, "{name} at {value} of its rate"),
                                  (M.PORT_ERRORS_PER_S, None, "{name} counting {value} errors"),
                                  (M.QPS_ERROR, None, "{name} holding {value} in an error state")),
                                 "no RDMA port counters", ("rdma",), "RDMA ports are saturated or erroring: ")


RDMA_BOTTLENECK = Pattern(
    id="network.rdma_bottleneck", layer=4, title="RDMA bottleneck",
    why="RDMA carries the collectives of multi-node jobs; a port near its rate or with rising error counters "
        "limits every rank's communication.",
    metrics=("rdma_port.port_util_pct", "rdma_port.port_errors_per_s", "rdma_port.rate_gbps", "rdma_port.qps_error"),
    thresholds=(Threshold("port_util_pct", "%", "above", "port throughput, share of its rate", critical=95, warning=90),
                Threshold("port_errors_per_s", "1/s", "above", "error counters (symbol, link, discards) per second",
                          warning=0),
                Threshold("qps_error", "queue pairs", "above", "queue pairs in an error state (ERR, SQE) at the end of "
                          "the window (`rdma res show qp`)", warning=0)),
    needs="RDMA ports (/sys/class/infiniband); queue pairs from iproute2's rdma",
    evidence="Each port over a threshold with its utilisation, error rate or queue pairs in error.",
    recommendations=(
        "Spread traffic over more ports/rails (NCCL_IB_HCA, one NIC per device pair).",
        "For errors: check cables/optics and port counters (perfquery, ethtool -S), and PFC/ECN on RoCE.",
        "Overlap communication with compute and compress gradients.",
    ),
    check=_rdma_bottleneck)


# -- network.nic_saturation ---------------------------------------------------------------
def _drops(n: Entity) -> float | None:
    values = [num(n, m) for m in (M.RX_DROPS_PER_S, M.TX_DROPS_PER_S)]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _nic_saturation(scope: Scope, t: dict[str, Any]) -> Verdict:
    nics = [n for n in scope.graph.entities(T.NIC) if n.attrs.get("name", n.id.rsplit(":", 1)[-1]) != "lo"]
    if not nics:
        return not_evaluated(scope.missing("no network interface in this graph", "net", "nic"))
    return several_metrics_check(scope, nics, t, "NICs",
                                 ((M.LINK_UTIL_PCT, None, "{name} at {value} of its link speed"),
                                  ("drops_per_s", _drops, "{name} dropping {value} packets")),
                                 "no NIC throughput or drop rates", ("net", "nic"), "NICs are saturated or dropping: ")


NIC_SATURATION = Pattern(
    id="network.nic_saturation", layer=4, title="NIC saturation or drops",
    why="A NIC at its link speed queues every packet behind the others; drops force retransmissions. Either "
        "way the data path to other nodes or to storage is the limit.",
    metrics=("nic.link_util_pct", "nic.rx_drops_per_s", "nic.tx_drops_per_s", "nic.speed_mbps"),
    thresholds=(Threshold("link_util_pct", "%", "above", "max(rx, tx) throughput, share of the link speed",
                          critical=95, warning=90),
                Threshold("drops_per_s", "1/s", "above", "received plus sent packets dropped per second",
                          warning=10, notice=1)),
    evidence="Each NIC (loopback excluded) over a threshold.",
    recommendations=(
        "Move bulk traffic (dataset reads, checkpoints) off the NIC used for collectives, or add a NIC.",
        "For drops: enlarge ring buffers (ethtool -G), spread IRQs over the NIC's NUMA-local CPUs.",
        "Check the negotiated speed (ethtool) matches the switch port.",
    ),
    check=_nic_saturation)


PATTERNS = [CONGESTION, RETRANSMISSION, RDMA_BOTTLENECK, NIC_SATURATION, ODD_HOST, SLOW_LINK]
