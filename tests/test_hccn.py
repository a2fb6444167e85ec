"""The Ascend NPUs' own RoCE ports through hccn_tool: parsers on outputs in the tool's format, the NPU
collector end to end on an 8-NPU Atlas 800T A2 through a stand-in hccn_tool, the network patterns on
what it finds (one host, and across hosts), and a host without hccn_tool."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from graph_checks import assert_known_names

import witty_profiler.collectors.lib.hccn as hccn
from witty_profiler.collectors.base import Context
from witty_profiler.collectors.lib.hccn import (
    parse_ip,
    parse_link,
    parse_net_health,
    parse_optical,
    parse_speed,
    parse_stat,
    stat_rates,
)
from witty_profiler.collectors.npu import NpuCollector

FIXTURES = Path(__file__).parent / "fixtures" / "npu"
HCCN = FIXTURES / "910b" / "hccn"
WINDOW_S = 10.0


def text(name: str) -> str:
    return (HCCN / name).read_text()


def test_parsers_on_the_tools_format():
    assert parse_link(text("i_0_link_g.txt")) == "UP" and parse_link(text("i_7_link_g.txt")) == "DOWN"
    assert parse_speed(text("i_0_speed_g.txt")) == 200.0 and parse_speed(text("i_6_speed_g.txt")) == 100.0
    assert parse_speed(text("i_7_speed_g.txt")) is None  # 'Speed: Unknown!' on a link that is down
    assert parse_net_health(text("i_0_net_health_g.txt")) == "Success"
    assert parse_net_health(text("i_7_net_health_g.txt")) == "Fault"
    assert parse_ip(text("i_3_ip_g.txt")) == "192.168.103.11"
    stat = parse_stat(text("i_2_stat_g.2.txt"))
    assert len(stat) == 46 and "packet statistics" not in stat  # the header line is not a counter
    assert stat["mac_rx_pfc_pkt_num"] == stat["mac_rx_pfc_pri4_pkt_num"] > 0
    optical = parse_optical(text("i_7_optical_g.txt"))
    assert optical["present"] is True and optical["temperature_c"] == 45
    assert optical["rx_power_mw"] == [0.0] * 4 and optical["rx_power_low_mw"] == 0.1445
    assert optical["tx_power_mw"][0] == 0.8632 and len(optical["tx_power_mw"]) == 4
    assert parse_optical("Error: no recorded output") is None
    # the layout Huawei's own guide shows (one lane, 'not present')
    doc = "optical info:\npresent              : not present\nTx Power             : 4.4035 mW\n" \
          "Rx Power             : 1.0189 mW\nRxPower Low Thres    : 0.1445 mW\n"
    old = parse_optical(doc)
    assert old["present"] is False and old["rx_power_mw"] == [1.0189] and old["tx_power_mw"] == [4.4035]


def test_stat_rates_and_a_cleared_counter():
    first = {"t": 0.0, "stat": parse_stat(text("i_2_stat_g.1.txt"))}
    last = {"t": WINDOW_S, "stat": parse_stat(text("i_2_stat_g.2.txt"))}
    r = stat_rates(first, last)
    assert r["port_xmit_bytes_per_s"] == pytest.approx(6.1e9) and r["port_rcv_bytes_per_s"] == pytest.approx(0.31e9)
    assert r["port_retrans_per_s"] == pytest.approx((1840 + 95) / WINDOW_S)
    assert r["port_errors_per_s"] == pytest.approx(12 / WINDOW_S)  # mac_rx_bad_pkt_num
    assert r["pfc_rx_frames_per_s"] == pytest.approx(3521.0) and r["pfc_tx_frames_per_s"] == 0
    assert r["cnp_rx_packets_per_s"] == pytest.approx(412.0)
    cleared = {"t": WINDOW_S, "stat": {**last["stat"], "mac_rx_pfc_pkt_num": 5}}  # hccn_tool -stat -c
    assert "pfc_rx_frames_per_s" not in stat_rates(first, cleared)


@pytest.fixture()
def hccn_host(tmp_path, monkeypatch):
    """npu-smi and hccn_tool stand-ins on PATH, playing the 910B recordings; the clock moves WINDOW_S
    between the start and the end of the window."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("npu-smi", "hccn_tool"):
        os.symlink(FIXTURES / tool, bin_dir / tool)
    calls = tmp_path / "calls"
    calls.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NPU_SMI_FIXTURE", str(FIXTURES / "910b"))
    monkeypatch.setenv("HCCN_TOOL_FIXTURE", str(HCCN))
    monkeypatch.setenv("HCCN_TOOL_CALLS", str(calls))
    now = [100.0]
    monkeypatch.setattr(hccn, "clock", lambda: now[0])

    def window(host: str = "a2", fixture: Path = HCCN):
        monkeypatch.setenv("HCCN_TOOL_FIXTURE", str(fixture))
        for f in calls.iterdir():
            f.unlink()
        now[0] = 100.0
        c = NpuCollector(Context(host=host, sys=tmp_path / "sys"))
        c.start()
        now[0] += WINDOW_S
        return c, c.finish()
    return window


def test_npu_roce_ports_end_to_end(hccn_host):
    c, g = hccn_host()
    assert c.status.status == "ok", c.status.reason
    assert_known_names(g)
    ports = {e.id: e for e in g.entities("rdma_port")}
    assert sorted(ports) == [f"rdma_port:a2:npu{i}:0" for i in range(8)]
    p0 = ports["rdma_port:a2:npu0:0"]
    assert p0.attrs["state"] == "UP" and p0.attrs["net_health"] == "Success" and p0.attrs["net_healthy"] is True
    assert p0.attrs["ip"] == "192.168.100.11" and p0.attrs["link_layer"] == "Ethernet"
    m = p0.metrics
    assert m["rate_gbps"] == 200 and m["port_xmit_bytes_per_s"] == pytest.approx(6.3e9)
    assert m["port_util_pct"] == pytest.approx(6.3e9 * 8 / 200e9 * 100, abs=0.01)
    assert m["port_errors_per_s"] == 0 and m["port_retrans_per_s"] == 0 and m["pfc_rx_frames_per_s"] == 0
    assert m["temperature_c"] == 47 and m["optical_rx_power_mw"] == pytest.approx(0.7401)
    assert p0.attrs["optical_rx_power_low"] is False
    # each port belongs to its NPU (NPU i is device i: the 910B table has no Phy-ID column)
    owners = {e.target: e.source for e in g.edges("has_port")}
    assert owners[p0.id] == "npu:a2:0000:c1:00.0" and owners["rdma_port:a2:npu2:0"] == "npu:a2:0000:81:00.0"
    lossy = ports["rdma_port:a2:npu2:0"]
    assert lossy.attrs["retrans_counters_delta"] == {"roce_new_pkt_rty_num": 1840, "roce_out_of_order_num": 95}
    assert lossy.attrs["error_counters_delta"]["mac_rx_bad_pkt_num"] == 12
    assert lossy.attrs["congestion_counters_delta"]["mac_rx_pfc_pkt_num"] == 35210
    assert lossy.metrics["pfc_rx_frames_per_s"] == pytest.approx(3521.0)
    assert ports["rdma_port:a2:npu6:0"].metrics["rate_gbps"] == 100  # trained at half speed
    dead = ports["rdma_port:a2:npu7:0"]
    assert dead.attrs["state"] == "DOWN" and dead.attrs["net_healthy"] is False and "rate_gbps" not in dead.metrics
    assert dead.metrics["optical_rx_power_mw"] == 0 and dead.attrs["optical_rx_power_low"] is True


def test_network_view_shows_the_npu_ports(hccn_host):
    from witty_profiler.converters import render_view

    _, g = hccn_host()
    lines = render_view(g, "network").text.splitlines()
    header = next(line for line in lines if "pfc_rx" in line).split()
    row = dict(zip(header, next(line for line in lines if line.startswith("rdma_port:a2:npu2:0")).split()))
    assert row["state"] == "UP" and row["rate"] == "200Gb/s" and row["pfc_rx"] == "3.52k/s"
    dead = dict(zip(header, next(line for line in lines if line.startswith("rdma_port:a2:npu7:0")).split()))
    assert dead["state"] == "DOWN"


def test_patterns_on_the_npu_ports(hccn_host):
    from witty_profiler.diagnosis import diagnose

    _, g = hccn_host()
    f = diagnose(g).finding("network.rdma_bottleneck")
    assert f is not None and f.subjects == ["rdma_port:a2:npu2:0"]
    assert [(e.metric, e.value) for e in f.evidence] == [("port_errors_per_s", pytest.approx(1.2))]


def test_odd_host_sees_a_port_that_trained_lower_and_one_that_drops_packets(hccn_host, tmp_path):
    """Three hosts of one cluster: the recorded one, and two peers whose NPU 6 runs at 200G and whose
    NPU 2 path is clean. network.odd_host names the recorded host for both."""
    from witty_profiler.diagnosis import diagnose

    peer = tmp_path / "peer-hccn"
    shutil.copytree(HCCN, peer)
    (peer / "i_6_speed_g.txt").write_text("Speed: 200000 Mb/s\n")
    for n in (1, 2):
        lines = (peer / f"i_2_stat_g.{n}.txt").read_text().splitlines()
        clean = [f"{k}:0" if k.split("_")[0] in ("roce", "mac") and ("rty" in k or "order" in k or "bad" in k or
                                                                     "pfc" in k) else f"{k}:{v}"
                 for k, _, v in (line.partition(":") for line in lines[1:])]
        (peer / f"i_2_stat_g.{n}.txt").write_text("\n".join([lines[0], *clean]) + "\n")
    graphs = [hccn_host("a2")[1], hccn_host("b2", peer)[1], hccn_host("c2", peer)[1]]
    merged = graphs[0]
    for other in graphs[1:]:
        merged = merged.merge(other)
    f = diagnose(merged).finding("network.odd_host")
    assert f is not None and f.subjects == ["host:a2"]
    odd = {e.metric: e.value for e in f.evidence}
    assert odd["rdma npu6:0 rate_gbps"] == 100
    assert odd["rdma npu2:0 errors_per_s"] == pytest.approx(1.2)
    assert odd["rdma npu2:0 retrans_per_s"] == pytest.approx(193.5)
    assert odd["rdma npu2:0 pfc_rx_per_s"] == pytest.approx(3521.0)


def test_without_hccn_tool_the_status_says_so(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(FIXTURES / "npu-smi", bin_dir / "npu-smi")
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + "/usr/bin:/bin")
    monkeypatch.setenv("NPU_SMI_FIXTURE", str(FIXTURES / "910b"))
    c = NpuCollector(Context(host="a2", sys=tmp_path / "sys"), hccn_tool=None)
    if c.hccn_tool:
        pytest.skip(f"this host has hccn_tool at {c.hccn_tool}")
    c.start()
    g = c.finish()
    assert c.status.status == "partial"
    assert c.status.reason == ("hccn_tool not found on PATH or at /usr/local/Ascend/driver/tools/hccn_tool: the NPUs' "
                               "RoCE ports (link, speed, packet, error, PFC and CNP counters) left out")
    assert len(g.entities("npu")) == 8 and not g.entities("rdma_port")


def test_310p_has_no_roce_port_to_ask(tmp_path, monkeypatch):
    """The 310 series has no RoCE port: hccn_tool is not run and its absence is no failure."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(FIXTURES / "npu-smi", bin_dir / "npu-smi")
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + "/usr/bin:/bin")
    monkeypatch.setenv("NPU_SMI_FIXTURE", str(FIXTURES / "310p"))
    c = NpuCollector(Context(host="duo", sys=tmp_path), hccn_tool=str(tmp_path / "missing"))
    c.start()
    g = c.finish()
    assert c.status.status == "ok" and c.hccn is None and not g.entities("rdma_port")
