"""InfiniBand/RoCE ports from node_exporter's infiniband collector (sources/promib.py), from a recorded
exposition in node_exporter's format (tests/fixtures/node-exporter-infiniband.prom: this machine has no
HCA). The live check replays it as a scrape target of the real Prometheus in
tests/test_source_prometheus_accel.py."""

from __future__ import annotations

import pytest

from tests.test_source_prometheus_accel import IB, rows
from witty_profiler import diagnose
from witty_profiler.sources.promib import add_ports
from witty_profiler.topology.graph import Graph
from witty_profiler.topology.models import Meta


def _graph(hosts=("h1",)) -> Graph:
    return Graph(Meta(hosts=list(hosts), source="prometheus"))


def test_infiniband_series_make_rdma_ports():
    g = _graph()
    assert add_ports(g, rows(IB, "h1")).status == "ok"
    up, down = g.entity("rdma_port:h1:mlx5_0:1"), g.entity("rdma_port:h1:mlx5_1:1")
    assert (up.attrs["state"], up.attrs["phys_state"]) == ("ACTIVE", "LinkUp")
    assert (down.attrs["state"], down.attrs["phys_state"]) == ("DOWN", "Disabled")
    assert up.attrs["hca_type"] == "MT4129" and up.attrs["fw_ver"] == "28.39.1002" and up.attrs["port"] == 1
    assert up.metrics["rate_gbps"] == 200 and up.metrics["port_util_pct"] == 0  # a replay's counters stand still
    assert up.metrics["port_errors_per_s"] == 0 and up.attrs["error_counters_delta"]["symbol_error"] == 0
    assert add_ports(_graph(), []).status == "unavailable"


def test_traffic_errors_and_retransmissions_over_the_window():
    base = {"device": "mlx5_0", "port": "1"}
    t = [(1000.0 + i, 0.0) for i in range(11)]

    def series(name, per_s):
        return ("h1", {"__name__": f"node_infiniband_{name}", **base}, [(ts, per_s * i) for i, (ts, _) in enumerate(t)])
    g = _graph()
    add_ports(g, [("h1", {"__name__": "node_infiniband_rate_bytes_per_second", **base}, [(ts, 2.5e10) for ts, _ in t]),
                  series("port_data_received_bytes_total", 24e9),  # 192 Gb/s of 200
                  series("port_data_transmitted_bytes_total", 5e9),
                  series("symbol_error_total", 2.0), series("link_downed_total", 0.5),
                  series("out_of_sequence_packets_received_total", 30.0)])
    port = g.entity("rdma_port:h1:mlx5_0:1")
    assert port.metrics["port_rcv_bytes_per_s"] == pytest.approx(24e9)
    assert port.metrics["port_util_pct"] == pytest.approx(96.0)
    assert port.metrics["port_errors_per_s"] == 2.5 and port.metrics["port_retrans_per_s"] == 30
    assert port.attrs["error_counters_delta"] == {"symbol_error": 20, "link_downed": 5}
    assert port.attrs["retrans_counters_delta"] == {"out_of_sequence": 300}
    d = diagnose(g)
    found = d.finding("network.rdma_bottleneck")
    assert found is not None and found.subjects == ["rdma_port:h1:mlx5_0:1"] and found.priority == "P0"


def test_odd_host_compares_infiniband_ports():
    g = _graph(("n1", "n2", "n3"))
    for host in ("n1", "n2", "n3"):
        g.entity_of("host", f"host:{host}", {"name": host})
        fixture = rows(IB, host)
        if host == "n3":  # its first port trained at half the rate
            fixture = [(h, labels, [(t, v / 2) for t, v in values])
                       if labels["__name__"] == "node_infiniband_rate_bytes_per_second" else (h, labels, values)
                       for h, labels, values in fixture]
        add_ports(g, fixture)
    odd = diagnose(g).finding("network.odd_host")
    assert odd is not None and odd.subjects == ["host:n3"]
    assert "rdma mlx5_0:1 rate_gbps" in [e.metric for e in odd.evidence]
