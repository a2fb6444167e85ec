"""InfiniBand and RoCE ports from node_exporter's infiniband collector (node_infiniband_*, on by default,
read from /sys/class/infiniband) -> rdma_port:<host>:<device>:<port>, as collectors/rdma.py makes them
from the same sysfs files, so that network.rdma_bottleneck and network.odd_host judge a past window.

  node_infiniband_rate_bytes_per_second -> rate_gbps; port_util_pct from the busier direction
  node_infiniband_state_id, _physical_state_id -> attrs state (ACTIVE...), phys_state (LinkUp...)
  node_infiniband_port_data_{received,transmitted}_bytes_total (node_exporter has already multiplied
      the 4-octet words) and _port_packets_* -> port_rcv/xmit_bytes_per_s, rx/tx_packets_per_s
  the IBTA error counters and mlx5's retransmission and congestion counters -> port_errors_per_s,
      port_retrans_per_s, cnp_tx/rx_packets_per_s, and each counter's increase under its sysfs name
  node_infiniband_info -> attrs hca_type, fw_ver
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from witty_profiler.topology.graph import Graph
from witty_profiler.topology.ids import entity_id
from witty_profiler.topology.models import CollectorStatus
from witty_profiler.topology.npuport import add_link_speed
from witty_profiler.topology.vocabulary import M, T

PREFIX = "node_infiniband_"
STATES = {1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
PHYS_STATES = {1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining", 5: "LinkUp",
               6: "LinkErrorRecovery", 7: "Phy Test"}
# node_exporter's name (without prefix and _total) -> the sysfs counter collectors/rdma.py reads
ERRORS = {"symbol_error": "symbol_error", "link_error_recovery": "link_error_recovery",
          "link_downed": "link_downed", "port_errors_received": "port_rcv_errors",
          "port_receive_remote_physical_errors": "port_rcv_remote_physical_errors",
          "port_receive_switch_relay_errors": "port_rcv_switch_relay_errors",
          "port_discards_transmitted": "port_xmit_discards",
          "port_constraint_errors_transmitted": "port_xmit_constraint_errors",
          "port_constraint_errors_received": "port_rcv_constraint_errors",
          "local_link_integrity_errors": "local_link_integrity_errors",
          "excessive_buffer_overrun_errors": "excessive_buffer_overrun_errors", "vl15_dropped": "VL15_dropped"}
RETRANS = {"out_of_sequence_packets_received": "out_of_sequence", "packet_sequence_errors": "packet_seq_err",
           "local_ack_timeout_errors": "local_ack_timeout_err", "rnr_nak_retry_packets_received": "rnr_nak_retry_err",
           "implied_nak_seq_errors": "implied_nak_seq_err", "duplicate_requests_packets": "duplicate_request",
           "req_cqes_errors": "req_cqe_error", "resp_cqes_errors": "resp_cqe_error",
           "resp_local_length_errors": "resp_local_length_error",
           "rx_icrc_encapsulated_errors": "rx_icrc_encapsulated"}
CONGESTION = {"np_ecn_marked_roce_packets_received": "np_ecn_marked_roce_packets",
              "np_cnp_packets_sent": "np_cnp_sent", "rp_cnp_packets_handled": "rp_cnp_handled"}
TRAFFIC = {"port_data_received_bytes": M.PORT_RCV_BYTES_PER_S, "port_data_transmitted_bytes": M.PORT_XMIT_BYTES_PER_S,
           "port_packets_received": M.RX_PACKETS_PER_S, "port_packets_transmitted": M.TX_PACKETS_PER_S,
           "np_cnp_packets_sent": M.CNP_TX_PACKETS_PER_S, "rp_cnp_packets_handled": M.CNP_RX_PACKETS_PER_S}
COUNTERS = [*ERRORS, *RETRANS, *CONGESTION, *TRAFFIC]
INFINIBAND_SERIES = (f"{PREFIX}(info|rate_bytes_per_second|state_id|physical_state_id|"
                     f"({'|'.join(dict.fromkeys(COUNTERS))})_total)")


def add_ports(g: Graph, rows: Iterable[tuple[str, dict, list]]) -> CollectorStatus:
    """rdma_port entities from node_infiniband_* rows (host, labels, values); the status of prometheus.rdma."""
    from witty_profiler.sources.prometheus import Steps, rate_metrics  # prometheus.py imports this module
    ports: dict[tuple[str, str, str], dict[str, list]] = defaultdict(dict)
    info: dict[tuple[str, str], dict[str, str]] = {}
    for host, labels, values in rows:
        name = labels.get("__name__", "")[len(PREFIX):]
        if name == "info":
            info[(host, labels.get("device", ""))] = labels
        elif labels.get("device") and labels.get("port"):
            ports[(host, labels["device"], labels["port"])][name.removesuffix("_total")] = values
    for (host, device, port), s in sorted(ports.items()):
        attrs: dict[str, Any] = {"device": device, "port": int(port) if port.isdigit() else port}
        for attr, series, names in (("state", "state_id", STATES), ("phys_state", "physical_state_id", PHYS_STATES)):
            if s.get(series):
                attrs[attr] = names.get(int(s[series][-1][1]), str(int(s[series][-1][1])))
        about = info.get((host, device), {})
        for attr, label in (("hca_type", "hca_type"), ("fw_ver", "firmware_version")):
            if about.get(label):
                attrs[attr] = about[label]
        metrics: dict[str, float] = {}
        for name, metric in TRAFFIC.items():
            if name in s:
                metrics.update(rate_metrics(metric, Steps().add(s[name])))
        for metric, group in ((M.PORT_ERRORS_PER_S, ERRORS), (M.PORT_RETRANS_PER_S, RETRANS)):
            total = Steps()
            for name in (n for n in group if n in s):
                total.add(s[name])
            if total:
                metrics[metric] = round(total.rate() or 0.0, 3)
        for attr, group in (("error_counters_delta", ERRORS), ("retrans_counters_delta", RETRANS),
                            ("congestion_counters_delta", CONGESTION)):
            attrs[attr] = {sysfs: int(sum(Steps().add(s[name]).dv.values())) for name, sysfs in group.items()
                           if name in s}
        rate = s.get("rate_bytes_per_second")
        if rate and rate[-1][1] > 0:
            add_link_speed(metrics, round(rate[-1][1] * 8 / 1e9, 3))
        g.entity_of(T.RDMA_PORT, entity_id(T.RDMA_PORT, host, device, port), attrs, metrics)
    if not ports:
        return CollectorStatus("unavailable", "no node_infiniband_* series: no InfiniBand/RoCE HCA on these hosts, "
                                              "or node_exporter runs with --no-collector.infiniband")
    return CollectorStatus("ok")
