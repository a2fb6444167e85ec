"""An Ascend NPU's own links from npu-exporter's series: its RoCE port and its HCCS links.

npu-exporter (mind-cluster, component/npu-exporter, collector/metrics) exports per chip what
hccn_tool and DCMI report. Here they take the shapes the live collectors give them
(collectors/lib/hccn.py, collectors/npu.py), so that the network and interconnect patterns and
network.odd_host compare them the same way:

  npu_chip_info_link_status (1 UP, 0 DOWN), npu_chip_info_network_status (1 healthy),
  npu_chip_link_speed (Mb/s), npu_chip_info_bandwidth_rx/tx (MB/s), npu_chip_mac_* and
  npu_chip_roce_* packet counters (exported as gauges: cumulative counts, read here as counters)
      -> rdma_port:<host>:npu<id>:0 (has_port from its npu, local_to its NUMA node): state,
         net_healthy, rate_gbps, port_rcv/xmit_bytes_per_s, port_util_pct, rx/tx_packets_per_s,
         port_errors_per_s, port_retrans_per_s, PFC and CNP rates, and the counters' increases
  npu_chip_info_hccs_bandwidth_info_total_tx/rx (GB/s, DCMI's unit) -> the npu's
      nvlink_tx/rx_bytes_per_s; the per-link _tx_<n> series -> nvlink_links (links reporting)
  npu_chip_info_hccs_statistic_info_crc_err_cnt_<n> -> attr hccs_crc_errors (increase in the window)
"""

from __future__ import annotations

import re
from typing import Any

from witty_profiler.topology import npuport
from witty_profiler.topology.graph import Graph
from witty_profiler.topology.models import Entity
from witty_profiler.topology.vocabulary import M
from witty_profiler.topology.windowstats import gauge

MB, GB = 1e6, 1e9  # hccn_tool's MB/s; DCMI's HCCS bandwidth in GB/s
# npu-exporter series -> hccn_tool -stat counter name (topology/npuport.py groups those names)
COUNTERS = {"npu_chip_mac_tx_bad_pkt_num": "mac_tx_bad_pkt_num", "npu_chip_mac_rx_bad_pkt_num": "mac_rx_bad_pkt_num",
            "npu_chip_info_rx_fcs_num": "mac_rx_fcs_err_pkt_num",
            "npu_chip_roce_rx_err_pkt_num": "roce_rx_err_pkt_num", "npu_chip_roce_tx_err_pkt_num": "roce_tx_err_pkt_num",
            "npu_chip_roce_unexpected_ack_num": "roce_unexpected_ack_num",
            "npu_chip_roce_verification_err_num": "roce_verification_err_num",
            "npu_chip_roce_qp_status_err_num": "roce_qp_status_err_num",
            "npu_chip_roce_new_pkt_rty_num": "roce_new_pkt_rty_num",
            "npu_chip_roce_out_of_order_num": "roce_out_of_order_num",
            "npu_chip_mac_tx_pfc_pkt_num": "mac_tx_pfc_pkt_num", "npu_chip_mac_rx_pfc_pkt_num": "mac_rx_pfc_pkt_num",
            "npu_chip_mac_tx_pause_num": "mac_tx_mac_pause_num", "npu_chip_mac_rx_pause_num": "mac_rx_mac_pause_num",
            "npu_chip_roce_tx_cnp_pkt_num": "roce_tx_cnp_pkt_num", "npu_chip_roce_rx_cnp_pkt_num": "roce_rx_cnp_pkt_num",
            "npu_chip_info_rx_ecn_num": "roce_ecn_db_num",
            "npu_chip_roce_rx_all_pkt_num": "roce_rx_all_pkt_num", "npu_chip_roce_tx_all_pkt_num": "roce_tx_all_pkt_num"}
RATES = ((M.RX_PACKETS_PER_S, ("roce_rx_all_pkt_num",)), (M.TX_PACKETS_PER_S, ("roce_tx_all_pkt_num",)),
         *npuport.COUNTER_RATES)
PORT = ("npu_chip_info_link_status", "npu_chip_info_network_status", "npu_chip_link_speed", "npu_chip_link_up_num",
        "npu_chip_info_bandwidth_rx", "npu_chip_info_bandwidth_tx")
HCCS = "npu_chip_info_hccs_"
NETWORK_SERIES = "|".join([*PORT, *COUNTERS, "npu_chip_info_hccs_bandwidth_info_(total_tx|total_rx|tx_[0-9]+)",
                           "npu_chip_info_hccs_statistic_info_crc_err_cnt_[0-9]+"])
_LINK = re.compile(r"^npu_chip_info_hccs_bandwidth_info_tx_(\d+)$")
_CRC = re.compile(r"^npu_chip_info_hccs_statistic_info_crc_err_cnt_(\d+)$")


def _increase(values: list) -> int:
    """A cumulative count's increase over the window; a count that went down was cleared and counts from zero."""
    from witty_profiler.sources.prometheus import Steps  # prometheus.py imports this module's user
    return int(sum(Steps().add(values).dv.values()))


def hccs_metrics(series: dict[str, list], attrs: dict[str, Any]) -> dict[str, float]:
    """An NPU's HCCS throughput (and links reporting, CRC errors in attrs) from its npu-exporter series."""
    m: dict[str, float] = {}
    for name, metric in (("total_tx", M.NVLINK_TX_BYTES_PER_S), ("total_rx", M.NVLINK_RX_BYTES_PER_S)):
        values = series.get(f"{HCCS}bandwidth_info_{name}")
        if values:
            m.update(gauge(metric, [v * GB for _, v in values], 0))
    links = [n for n in series if _LINK.match(n)]
    if links:
        m[M.NVLINK_LINKS] = len(links)
    crc = [_increase(v) for n, v in series.items() if _CRC.match(n)]
    if crc:
        attrs["hccs_crc_errors"] = sum(crc)
    return m


def add_roce_port(g: Graph, host: str, npu: Entity, index: str, series: dict[str, list]) -> str | None:
    """The rdma_port of an NPU's own RoCE port, as collectors/lib/hccn.py makes it; None without its series."""
    if not any(name in series for name in (*PORT, *COUNTERS)):
        return None
    last = {name: values[-1][1] for name, values in series.items() if values}
    attrs: dict[str, Any] = {"device": f"npu{index}", "port": 0, "link_layer": "Ethernet",
                             "numa_node": npu.attrs.get("numa_node")}
    if "npu_chip_info_link_status" in last:
        attrs["state"] = {1: "UP", 0: "DOWN"}.get(int(last["npu_chip_info_link_status"]), "UNKNOWN")
        states = sorted({int(v) for _, v in series["npu_chip_info_link_status"]})
        if len(states) > 1:
            attrs["link_states_seen"] = ["UP" if s == 1 else "DOWN" if s == 0 else "UNKNOWN" for s in states]
    if "npu_chip_info_network_status" in last:  # -1: the exporter could not ask (hccn_tool failed)
        status = int(last["npu_chip_info_network_status"])
        if status >= 0:
            attrs["net_healthy"] = status == 1
    metrics: dict[str, float] = {}
    for name, metric in (("npu_chip_info_bandwidth_rx", M.PORT_RCV_BYTES_PER_S),
                         ("npu_chip_info_bandwidth_tx", M.PORT_XMIT_BYTES_PER_S)):
        if name in series:
            metrics.update(gauge(metric, [v * MB for _, v in series[name]], 0))
    speed = last.get("npu_chip_link_speed")
    if speed and speed > 0:
        npuport.add_link_speed(metrics, speed / 1000)  # Mb/s
    counts = {COUNTERS[name]: values for name, values in series.items() if name in COUNTERS and values}
    if counts:
        span = max(v[-1][0] for v in counts.values()) - min(v[0][0] for v in counts.values())
        deltas = {name: _increase(values) for name, values in counts.items()}
        metrics.update(npuport.counter_rates(deltas, span, RATES))
        attrs.update(npuport.delta_attrs(deltas))
    return npuport.add_port(g, host, npu, npuport.port_id(host, index), attrs, metrics)
