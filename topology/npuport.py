"""The rdma_port of an Ascend NPU's own RoCE port, one shape whether its counters were read live with
hccn_tool (collectors/lib/hccn.py) or come from npu-exporter's series (sources/promascend.py), so that the
network patterns and network.odd_host compare both the same way.

Counter names are hccn_tool -stat's; npu-exporter's series are mapped onto them by their reader.
"""

from __future__ import annotations

from typing import Any

from witty_profiler.topology.graph import Graph
from witty_profiler.topology.ids import entity_id, numa_id
from witty_profiler.topology.models import Entity
from witty_profiler.topology.vocabulary import E, M, T

# counters that only move when a frame or packet was bad or refused
ERROR_COUNTERS = ("mac_tx_bad_pkt_num", "mac_rx_bad_pkt_num", "mac_rx_fcs_err_pkt_num", "roce_rx_err_pkt_num",
                  "roce_tx_err_pkt_num", "roce_unexpected_ack_num", "roce_verification_err_num",
                  "roce_qp_status_err_num")
# packets sent again or received out of order: loss on the path (Huawei's guide: a rising
# roce_new_pkt_rty_num during a job means packet loss and retransmission in the network)
RETRANS_COUNTERS = ("roce_new_pkt_rty_num", "roce_out_of_order_num")
# flow control and congestion notification: rates, not errors
CONGESTION_COUNTERS = ("mac_tx_pfc_pkt_num", "mac_rx_pfc_pkt_num", "mac_tx_mac_pause_num", "mac_rx_mac_pause_num",
                       "roce_tx_cnp_pkt_num", "roce_rx_cnp_pkt_num", "roce_ecn_db_num")
# rates both readers take from the same counters (each adds its own bytes and packets in front)
COUNTER_RATES = ((M.PORT_ERRORS_PER_S, ERROR_COUNTERS), (M.PORT_RETRANS_PER_S, RETRANS_COUNTERS),
                 (M.PFC_RX_FRAMES_PER_S, ("mac_rx_pfc_pkt_num",)), (M.PFC_TX_FRAMES_PER_S, ("mac_tx_pfc_pkt_num",)),
                 (M.CNP_RX_PACKETS_PER_S, ("roce_rx_cnp_pkt_num",)), (M.CNP_TX_PACKETS_PER_S, ("roce_tx_cnp_pkt_num",)))
DELTA_ATTRS = (("error_counters_delta", ERROR_COUNTERS), ("retrans_counters_delta", RETRANS_COUNTERS),
               ("congestion_counters_delta", CONGESTION_COUNTERS))


def port_id(host: str, device: object) -> str:
    return entity_id(T.RDMA_PORT, host, f"npu{device}", 0)


def counter_rates(deltas: dict[str, int], span_s: float,
                  rates: tuple[tuple[str, tuple[str, ...]], ...]) -> dict[str, float]:
    """Each metric of `rates` as the sum of its counters' increases over span_s; a metric none of
    whose counters is known is left out, as is every one when span_s is not positive."""
    out: dict[str, float] = {}
    if span_s <= 0:
        return out
    for metric, names in rates:
        known = [deltas[n] for n in names if n in deltas]
        if known:
            out[metric] = round(sum(known) / span_s, 3)
    return out


def delta_attrs(deltas: dict[str, int]) -> dict[str, dict[str, int]]:
    """error/retrans/congestion_counters_delta: each group's counters' increases over the window."""
    return {attr: {n: deltas[n] for n in names if n in deltas} for attr, names in DELTA_ATTRS}


def add_link_speed(metrics: dict[str, float], speed_gbps: float) -> None:
    """rate_gbps, and port_util_pct from the busier direction's bytes against it: the one formula of every
    RDMA or RoCE port, whichever reader (rdma, hccn_tool, npu-exporter, node_exporter) saw it."""
    metrics[M.RATE_GBPS] = speed_gbps
    busiest = max(metrics.get(M.PORT_RCV_BYTES_PER_S, 0.0), metrics.get(M.PORT_XMIT_BYTES_PER_S, 0.0))
    metrics[M.PORT_UTIL_PCT] = round(busiest * 8 / (speed_gbps * 1e9) * 100, 3)


def add_port(g: Graph, host: str, npu: Entity, eid: str, attrs: dict[str, Any], metrics: dict[str, float]) -> str:
    """The port entity, has_port from its NPU and local_to the NPU's NUMA node (attrs' numa_node)."""
    numa = attrs.get("numa_node")
    g.entity_of(T.RDMA_PORT, eid, attrs, metrics)
    g.edge_of(E.HAS_PORT, npu.id, eid)
    if numa is not None:
        g.edge_of(E.LOCAL_TO, eid, numa_id(host, numa))
    return eid
