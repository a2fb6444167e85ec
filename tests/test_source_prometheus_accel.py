"""Accelerators in the Prometheus source: GPUs from dcgm-exporter, NPUs from npu-exporter.

The expositions are recorded fixtures in the exporters' own format (tests/fixtures/dcgm-exporter.prom,
npu-exporter.prom), as this machine has neither GPU nor NPU. The quick tests read them as a range
query would give them; the live ones replay them as scrape targets of the real Prometheus of
tests/prometheus_stack.py (the dcgm-exporter on host 1, the npu-exporter on host 2) and read the
window back through the HTTP API.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.prometheus_stack import Replay, running_stack
from witty_profiler.sources.promaccel import add_gpus, add_npus
from witty_profiler.sources.prometheus import collect_window
from witty_profiler.topology.graph import Graph
from witty_profiler.topology.models import Meta

FIXTURES = Path(__file__).parent / "fixtures"
DCGM, NPU = FIXTURES / "dcgm-exporter.prom", FIXTURES / "npu-exporter.prom"
IB = FIXTURES / "node-exporter-infiniband.prom"
WINDOW_S = 10
MiB = 1024 * 1024
HOT_GPU, IDLE_GPU = "0000:18:00.0", "0000:2a:00.0"
HOT_NPU, SICK_NPU = "0000:c1:00.0", "0000:01:00.0"
_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def exposition(path: Path) -> dict[tuple[str, tuple], float]:
    """(name, sorted labels) -> value of each sample of a text exposition."""
    out = {}
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        name, labels, value = _SAMPLE.match(line).groups()
        out[(name, tuple(sorted(_LABEL.findall(labels or ""))))] = float(value)
    return out


def rows(path: Path, host: str, steps: int = 11) -> list[tuple[str, dict, list]]:
    """The fixture's samples as a range query of `steps` steps gives them, constant over the window."""
    return [(host, {"__name__": name, **dict(labels)}, [(1000.0 + t, value) for t in range(steps)])
            for (name, labels), value in exposition(path).items()]


def value(path: Path, name: str, **match: str) -> float:
    hits = [v for (n, labels), v in exposition(path).items() if n == name and set(match.items()) <= set(labels)]
    assert len(hits) == 1, (name, match)
    return hits[0]


def _graph() -> Graph:
    return Graph(Meta(hosts=["h1"], source="prometheus"))


# -- the parsing, without an engine ----------------------------------------------------------
def test_dcgm_series_make_gpus():
    g = _graph()
    status = add_gpus(g, rows(DCGM, "h1"))
    assert status.status == "ok"
    hot, idle = g.entity(f"gpu:h1:{HOT_GPU}"), g.entity(f"gpu:h1:{IDLE_GPU}")
    assert hot.attrs["index"] == 0 and hot.attrs["uuid"].startswith("GPU-5d3c") and "H100" in hot.attrs["name"]
    assert hot.metrics["util_pct"] == 97 and hot.metrics["util_pct_p95"] == 97 and hot.metrics["util_pct_max"] == 97
    assert hot.metrics["memory_used_bytes"] == 70667 * MiB
    assert hot.metrics["memory_total_bytes"] == (70667 + 9886) * MiB
    assert hot.metrics["memory_used_pct"] == round(100 * 70667 / (70667 + 9886), 2)
    assert (hot.metrics["sm_clock_mhz"], hot.metrics["mem_clock_mhz"]) == (1410, 2619)
    assert hot.metrics["power_w"] == pytest.approx(698.41) and hot.metrics["temperature_c"] == 87
    assert hot.metrics["throttle_thermal"] == 1 and hot.metrics["throttle_power"] == 1
    assert hot.attrs["throttle_reasons"] == ["sw_power_cap", "hw_thermal_slowdown"]
    assert hot.metrics["pcie_tx_bytes_per_s"] == 2147483648 and hot.metrics["pcie_rx_bytes_per_s"] == 5368709120
    assert hot.metrics["xid_errors_total"] == 0
    assert idle.metrics["util_pct"] == 0 and idle.metrics["memory_used_bytes"] == 0
    assert idle.metrics["throttle_thermal"] == 0 and idle.metrics["throttle_power"] == 0
    assert idle.attrs["throttle_reasons"] == ["gpu_idle"]
    # NVLink: the DCP byte rates as they are, field 449 as MB/s for both directions
    assert hot.metrics["nvlink_tx_bytes_per_s"] == 92106517504 and hot.metrics["nvlink_rx_bytes_per_s"] == 91473305600
    assert hot.metrics["nvlink_bytes_per_s"] == 184213 * 1e6 and idle.metrics["nvlink_bytes_per_s"] == 0
    # errors over the window (the replayed counters stand still) and the memory repair state at its end
    assert hot.metrics["ecc_errors_total"] == 0 and hot.metrics["ecc_corrected_errors_total"] == 0
    assert hot.metrics["pcie_replays_total"] == 0
    assert hot.attrs["remapped_rows"] == {"correctable": 2, "uncorrectable": 0}
    assert hot.attrs["row_remap_failure"] is False
    # DCGM's profiling ratios as the percentages NVML's GPM gives the live collector
    assert (hot.metrics["sm_active_pct"], hot.metrics["sm_occupancy_pct"]) == (87.3, 41.2)
    assert (hot.metrics["tensor_active_pct"], hot.metrics["hbm_bw_util_pct"]) == (53.8, 62.7)
    assert idle.metrics["sm_active_pct"] == 0 and idle.metrics["hbm_bw_util_pct"] == 0


def test_xid_counts_changes_and_throttle_bits_over_the_window():
    labels = {"gpu": "3", "pci_bus_id": "00000000:9A:00.0", "UUID": "GPU-x", "modelName": "A100"}
    xid = [(0.0, 0.0), (1.0, 0.0), (2.0, 79.0), (3.0, 79.0), (4.0, 48.0)]
    reasons = [(0.0, 0.0), (1.0, 0x20), (2.0, 0.0), (3.0, 0.0), (4.0, 0.0)]
    g = _graph()
    status = add_gpus(g, [("h1", {"__name__": "DCGM_FI_DEV_XID_ERRORS", **labels}, xid),
                          ("h1", {"__name__": "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", **labels}, reasons)])
    gpu = g.entity("gpu:h1:0000:9a:00.0")
    assert gpu.metrics["xid_errors_total"] == 2 and gpu.attrs["xid_codes"] == [48, 79]
    assert gpu.metrics["throttle_thermal"] == 1 and gpu.metrics["throttle_power"] == 0
    assert status.status == "partial" and "DCGM_FI_DEV_GPU_UTIL" in status.reason
    assert add_gpus(_graph(), []).reason == "no DCGM_FI_* series"


def test_newer_dcgm_names_and_error_counters_over_the_window():
    """DCGM 3.3 renamed the throttle field (clocks-event reasons); dcgm-exporter 4.x its Hostname label."""
    labels = {"gpu": "0", "pci_bus_id": "00000000:9A:00.0", "hostname": "gpu07", "modelName": "H100"}
    events = [(0.0, 0.0), (1.0, 0x08), (2.0, 0.0)]
    sbe = [(0.0, 10.0), (1.0, 13.0), (2.0, 19.0)]
    dbe = [(0.0, 0.0), (1.0, 0.0), (2.0, 1.0)]
    replays = [(0.0, 100.0), (1.0, 100.0), (2.0, 7.0)]  # the driver reloaded: counts from zero
    g = _graph()
    add_gpus(g, [("h1", {"__name__": "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", **labels}, events),
                 ("h1", {"__name__": "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", **labels}, sbe),
                 ("h1", {"__name__": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", **labels}, dbe),
                 ("h1", {"__name__": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", **labels}, replays),
                 ("h1", {"__name__": "DCGM_FI_DEV_RETIRED_PENDING", **labels}, [(0.0, 0.0), (2.0, 1.0)])])
    gpu = g.entity("gpu:h1:0000:9a:00.0")
    assert gpu.metrics["throttle_thermal"] == 1 and gpu.attrs["throttle_reasons"] == ["hw_slowdown"]
    assert gpu.attrs["hostname"] == "gpu07"
    assert gpu.metrics["ecc_corrected_errors_total"] == 9 and gpu.metrics["ecc_errors_total"] == 1
    assert gpu.metrics["pcie_replays_total"] == 7
    assert gpu.attrs["retired_pages"] == {"pending": 1}


def test_npu_exporter_series_make_npus():
    g = _graph()
    status = add_npus(g, rows(NPU, "h1"))
    assert status.status == "ok"
    hot, sick = g.entity(f"npu:h1:{HOT_NPU}"), g.entity(f"npu:h1:{SICK_NPU}")
    assert hot.attrs["index"] == 0 and hot.attrs["name"] == "Ascend910B3" and hot.attrs["health"] == "OK"
    assert hot.metrics["util_pct"] == 92 and hot.metrics["temperature_c"] == 84
    assert hot.metrics["power_w"] == pytest.approx(352.7) and hot.metrics["sm_clock_mhz"] == 1300
    assert hot.metrics["memory_used_bytes"] == 58312 * MiB and hot.metrics["memory_total_bytes"] == 65536 * MiB
    assert hot.metrics["memory_used_pct"] == round(100 * 58312 / 65536, 2)
    assert sick.attrs["health"] == "Unhealthy" and sick.attrs["error_codes"] == [hex(2350000263)]
    assert sick.metrics["util_pct"] == 0
    assert add_npus(_graph(), []).status == "unavailable"
    # HCCS: DCMI's GB/s, 7 links reporting on a 910B
    assert hot.metrics["nvlink_tx_bytes_per_s"] == 28.6e9 and hot.metrics["nvlink_rx_bytes_per_s"] == 28.1e9
    assert hot.metrics["nvlink_links"] == 7 and hot.attrs["hccs_crc_errors"] == 0


def test_npu_exporter_roce_series_make_the_npus_ports():
    g = _graph()
    add_npus(g, rows(NPU, "h1"))
    hot, sick = g.entity("rdma_port:h1:npu0:0"), g.entity("rdma_port:h1:npu1:0")
    assert ("npu:h1:" + HOT_NPU, hot.id) in [(e.source, e.target) for e in g.edges("has_port")]
    assert hot.attrs["state"] == "UP" and hot.attrs["net_healthy"] is True and hot.attrs["link_layer"] == "Ethernet"
    assert sick.attrs["state"] == "DOWN" and sick.attrs["net_healthy"] is False
    assert hot.metrics["rate_gbps"] == 200 and hot.metrics["port_rcv_bytes_per_s"] == 11874.3e6
    assert hot.metrics["port_util_pct"] == pytest.approx(11902.8e6 * 8 / 200e9 * 100, abs=1e-3)
    # the counters stand still in a replay: nothing over the window
    assert hot.metrics["port_errors_per_s"] == 0 and hot.metrics["port_retrans_per_s"] == 0
    assert hot.attrs["retrans_counters_delta"] == {"roce_new_pkt_rty_num": 0, "roce_out_of_order_num": 0}


def test_npu_counters_over_the_window_and_a_flapping_link():
    labels = {"id": "3", "pcie_bus_info": "0000:41:00.0", "model_name": "Ascend910B3"}
    g = _graph()
    add_npus(g, [("h1", {"__name__": "npu_chip_info_link_status", **labels}, [(0.0, 1.0), (5.0, 0.0), (10.0, 1.0)]),
                 ("h1", {"__name__": "npu_chip_roce_new_pkt_rty_num", **labels},
                  [(0.0, 100.0), (5.0, 130.0), (10.0, 150.0)]),
                 ("h1", {"__name__": "npu_chip_roce_rx_err_pkt_num", **labels}, [(0.0, 7.0), (5.0, 2.0), (10.0, 4.0)]),
                 ("h1", {"__name__": "npu_chip_info_hccs_statistic_info_crc_err_cnt_1", **labels},
                  [(0.0, 0.0), (10.0, 3.0)])])
    port = g.entity("rdma_port:h1:npu3:0")
    assert port.attrs["state"] == "UP" and port.attrs["link_states_seen"] == ["DOWN", "UP"]
    assert port.metrics["port_retrans_per_s"] == 5.0  # 50 retried packets in 10 s
    assert port.metrics["port_errors_per_s"] == 0.4  # cleared at 5 s: 2 + 2 counted from zero
    assert g.entity("npu:h1:0000:41:00.0").attrs["hccs_crc_errors"] == 3


# -- with real engines -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with running_stack(tmp_path_factory.mktemp("prometheus-accel"), WINDOW_S + 4, prefix="wpa",
                       replays=(Replay("dcgm", 1, 9400, DCGM), Replay("npu", 2, 8082, NPU),
                                Replay("ib", 1, 9101, IB))) as s:
        yield s


@pytest.fixture(scope="module")
def window(stack):
    end = float(int(time.time()) - 2)
    return collect_window(stack.url, end - WINDOW_S, end, step=1.0, match='{job="node"}')


@pytest.mark.live
@pytest.mark.slow
def test_accelerators_from_prometheus_equal_the_exporters(stack, window):
    g = window.graph
    gpu_host, npu_host, bare = stack.hosts
    assert g.meta.collectors["prometheus.dcgm"].status == "ok"
    assert g.meta.collectors["prometheus.npu"].status == "ok"
    assert g.meta.collectors["prometheus.node"].status == "ok"
    assert sorted(e.id for e in g.entities("gpu")) == [f"gpu:{gpu_host}:{HOT_GPU}", f"gpu:{gpu_host}:{IDLE_GPU}"]
    assert sorted(e.id for e in g.entities("npu")) == [f"npu:{npu_host}:{SICK_NPU}", f"npu:{npu_host}:{HOT_NPU}"]
    assert not [e for e in g.entities("gpu") + g.entities("npu") if e.id.split(":")[1] == bare]
    for address, gpu in ((HOT_GPU, "0"), (IDLE_GPU, "1")):
        m = g.entity(f"gpu:{gpu_host}:{address}").metrics
        assert m["util_pct"] == m["util_pct_max"] == value(DCGM, "DCGM_FI_DEV_GPU_UTIL", gpu=gpu)
        assert m["sm_clock_mhz"] == value(DCGM, "DCGM_FI_DEV_SM_CLOCK", gpu=gpu)
        assert m["temperature_c"] == value(DCGM, "DCGM_FI_DEV_GPU_TEMP", gpu=gpu)
        assert m["power_w"] == pytest.approx(value(DCGM, "DCGM_FI_DEV_POWER_USAGE", gpu=gpu), abs=0.01)
        used, free = value(DCGM, "DCGM_FI_DEV_FB_USED", gpu=gpu), value(DCGM, "DCGM_FI_DEV_FB_FREE", gpu=gpu)
        assert m["memory_used_bytes"] == used * MiB and m["memory_total_bytes"] == (used + free) * MiB
        assert m["pcie_rx_bytes_per_s"] == value(DCGM, "DCGM_FI_PROF_PCIE_RX_BYTES", gpu=gpu)
        assert m["nvlink_tx_bytes_per_s"] == value(DCGM, "DCGM_FI_PROF_NVLINK_TX_BYTES", gpu=gpu)
        assert m["nvlink_bytes_per_s"] == value(DCGM, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", gpu=gpu) * 1e6
        assert m["hbm_bw_util_pct"] == pytest.approx(100 * value(DCGM, "DCGM_FI_PROF_DRAM_ACTIVE", gpu=gpu), abs=0.01)
        assert m["sm_active_pct"] == pytest.approx(100 * value(DCGM, "DCGM_FI_PROF_SM_ACTIVE", gpu=gpu), abs=0.01)
        assert g.entity(f"gpu:{gpu_host}:{address}").attrs["remapped_rows"]["correctable"] == value(
            DCGM, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", gpu=gpu)
    for address, chip in ((HOT_NPU, "0"), (SICK_NPU, "1")):
        n = g.entity(f"npu:{npu_host}:{address}")
        assert n.metrics["util_pct"] == value(NPU, "npu_chip_info_utilization", id=chip)
        assert n.metrics["temperature_c"] == value(NPU, "npu_chip_info_temperature", id=chip)
        assert n.metrics["sm_clock_mhz"] == value(NPU, "npu_chip_info_aicore_current_freq", id=chip)
        assert n.metrics["memory_used_bytes"] == value(NPU, "npu_chip_info_hbm_used_memory", id=chip) * MiB
        assert n.attrs["health"] == ("OK" if value(NPU, "npu_chip_info_health_status", id=chip) == 1 else "Unhealthy")
        port = g.entity(f"rdma_port:{npu_host}:npu{chip}:0")
        assert port.metrics["rate_gbps"] == value(NPU, "npu_chip_link_speed", id=chip) / 1000
        assert port.attrs["state"] == ("UP" if value(NPU, "npu_chip_info_link_status", id=chip) == 1 else "DOWN")
    assert window.requests <= 17
    # the GPU host's InfiniBand ports, from node_exporter's infiniband collector as recorded
    assert g.meta.collectors["prometheus.rdma"].status == "ok"
    ib = g.entity(f"rdma_port:{gpu_host}:mlx5_0:1")
    assert ib.attrs["state"] == "ACTIVE" and g.entity(f"rdma_port:{gpu_host}:mlx5_1:1").attrs["state"] == "DOWN"
    assert ib.metrics["rate_gbps"] == value(IB, "node_infiniband_rate_bytes_per_second", device="mlx5_0") * 8 / 1e9


@pytest.mark.live
@pytest.mark.slow
def test_diagnosis_names_the_throttled_gpu(stack, window):
    from witty_profiler import diagnose
    d = diagnose(window.graph)
    throttled = d.finding("compute.accelerator_throttling")
    assert throttled is not None and throttled.subjects == [f"gpu:{stack.hosts[0]}:{HOT_GPU}"]
    # no process is known to use a device (Prometheus has no processes): idle is not a finding
    assert d.finding("compute.accelerator_idle") is None
    assert d.finding("network.nic_saturation").subjects == [f"nic:{stack.hosts[2]}:eth1"]
