"""Layer 4 patterns on hand-built graphs: at, just below and just above every threshold."""

from __future__ import annotations

import pytest

from witty_profiler.diagnosis import diagnose
from witty_profiler.diagnosis.catalog import catalog

from trace_graphs import latency, link_bandwidths
from diagnosis_graphs import assert_threshold, host, new_graph, process, threshold_cases


def connection(g, remote="10.0.0.2:29500", owner=10, **metrics):
    cid = g.entity_of("tcp_connection", f"tcp_connection:h1:10.0.0.1:40000:{remote}",
                      {"local": "10.0.0.1:40000", "remote": remote, "pid": owner},
                      {"bytes_sent_total": 50e6, **metrics}).id
    g.edge_of("owns_connection", f"process:h1:{owner}", cid)
    return cid


def rtt(v):
    g = new_graph()
    process(g, 10, "train")
    connection(g, rtt_us=v, retrans_total=0)
    return g


def retrans(v):
    g = new_graph()
    host(g, tcp_retrans_pct=v, tcp_out_segs_per_s=5000.0, tcp_retrans_segs_per_s=v * 50)
    return g


def rdma(metric, **others):
    def build(v):
        g = new_graph()
        g.entity_of("rdma_port", "rdma_port:h1:mlx5_0:1", {"state": "ACTIVE", "rate_gbps": 200},
                    {metric: v, **others})
        return g
    return build


def nic(metric, **others):
    def build(v):
        g = new_graph()
        g.entity_of("nic", "nic:h1:eth0", {"name": "eth0", "speed_mbps": 100000}, {metric: v, **others})
        return g
    return build


BUILDERS = {
    # four ranks at 10 GB/s over RDMA in one AllGather and one v times slower
    ("network.slow_link", "slowdown"): lambda v: link_bandwidths([10.0, 10.0, 10.0, 10.0, 10.0 / v]),
    ("network.slow_link", "latency_us"): latency,
    ("network.congestion", "rtt_us"): rtt,
    ("network.retransmission", "tcp_retrans_pct"): retrans,
    ("network.rdma_bottleneck", "port_util_pct"): rdma("port_util_pct", port_errors_per_s=0.0),
    ("network.rdma_bottleneck", "port_errors_per_s"): rdma("port_errors_per_s", port_util_pct=10.0),
    ("network.rdma_bottleneck", "qps_error"): rdma("qps_error", port_util_pct=10.0, port_errors_per_s=0.0),
    ("network.nic_saturation", "link_util_pct"): nic("link_util_pct", rx_drops_per_s=0.0),
    ("network.nic_saturation", "drops_per_s"): nic("rx_drops_per_s", link_util_pct=10.0),
}


def test_every_threshold_of_the_layer_has_a_builder():
    assert {(p.id, t.name) for p in catalog().values() if p.layer == 4 for t in p.thresholds} == set(BUILDERS)


@pytest.mark.parametrize("pattern, name, level, limit, direction", threshold_cases(4))
def test_threshold(pattern, name, level, limit, direction):
    assert_threshold(BUILDERS[(pattern, name)], pattern, level, limit, direction)


def test_loopback_and_quiet_connections_are_not_judged():
    g = new_graph()
    process(g, 10, "train")
    connection(g, remote="127.0.0.1:29500", rtt_us=5000.0)
    connection(g, remote="10.0.0.3:22", rtt_us=5000.0, bytes_sent_total=100.0)
    assert diagnose(g).status("network.congestion") == "clear"
    own = connection(g, remote="10.0.0.9:8000", rtt_us=5000.0)  # another address of this same host
    g.entity(own).attrs["remote_is_local"] = True
    assert diagnose(g).status("network.congestion") == "clear"


def test_internet_connections_do_not_count_on_the_whole_host():
    g = new_graph()
    g.entity_of("tcp_connection", "tcp_connection:h1:a", {"local": "10.0.0.1:5", "remote": "8.8.8.8:443"},
                {"rtt_us": 30000.0, "bytes_sent_total": 50e6})
    assert diagnose(g).status("network.congestion") == "clear"
    g.entity("tcp_connection:h1:a").attrs["remote"] = "[fd00::2]:29500"
    assert diagnose(g).finding("network.congestion").severity == "critical"


def test_too_little_tcp_traffic_to_judge_retransmits():
    g = new_graph()
    host(g, tcp_retrans_pct=50.0, tcp_out_segs_per_s=2.0)
    d = diagnose(g)
    assert d.status("network.retransmission") == "clear"
    assert "too little TCP traffic" in next(c.reason for c in d.coverage if c.pattern == "network.retransmission")


def test_loopback_nic_is_ignored():
    g = new_graph()
    g.entity_of("nic", "nic:h1:lo", {"name": "lo"}, {"rx_drops_per_s": 500.0})
    assert diagnose(g).status("network.nic_saturation") == "not_evaluated"


def test_no_segments_sent_is_too_little_traffic_not_missing_data():
    g = new_graph()
    host(g, tcp_out_segs_per_s=0.0, tcp_retrans_segs_per_s=0.0)  # 0 / 0: no retransmit share
    assert diagnose(g).status("network.retransmission") == "clear"
