"""GPU collector on recorded NVML answers of two real server shapes, and on this host (no NVML)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from graph_checks import assert_known_names
from sysfs_tree import add_netdev, add_pci

from witty_profiler.collectors.base import Context
from witty_profiler.collectors.gpu import MAX_NVLINKS, NVLINK_BYTES_PER_S, GpuCollector, gpu_link
from witty_profiler.collectors.lib.nvml import RecordedNvml

FIXTURES = Path(__file__).parent / "fixtures" / "gpu"
H100_BUSES = ["1b", "43", "52", "61", "9d", "c3", "d1", "df"]


def run(recording: str, sys_root: Path, host: str = "n1"):
    c = GpuCollector(Context(host=host, sys=sys_root), nvml=RecordedNvml(FIXTURES / recording))
    c.start()
    c.sample()
    return c, c.finish()


@pytest.fixture()
def hgx_sysfs(tmp_path: Path) -> Path:
    """Each H100 shares a PCIe switch with one ConnectX-7, four pairs per socket (DGX H100 layout)."""
    sys_root = tmp_path / "sys"
    for i, bus in enumerate(H100_BUSES):
        numa = 0 if i < 4 else 1
        rc = f"pci0000:{int(bus, 16) - 3:02x}"
        up = [f"0000:{int(bus, 16) - 3:02x}:01.0", f"0000:{int(bus, 16) - 2:02x}:00.0"]
        cpus = "0-55,112-167" if numa == 0 else "56-111,168-223"
        add_pci(sys_root, rc, up + [f"0000:{int(bus, 16) - 1:02x}:00.0"], f"0000:{bus}:00.0", cls="0x030200",
                numa=numa, cpulist=cpus, speed="32.0 GT/s PCIe", max_speed="32.0 GT/s PCIe", driver="nvidia")
        nic = add_pci(sys_root, rc, up + [f"0000:{int(bus, 16) - 1:02x}:01.0"], f"0000:{int(bus, 16) + 1:02x}:00.0",
                      cls="0x020700", vendor="0x15b3", device="0x1021", numa=numa, cpulist=cpus,
                      speed="32.0 GT/s PCIe", max_speed="32.0 GT/s PCIe")
        add_netdev(nic, f"ibp{int(bus, 16) + 1}s0")
        (nic / "infiniband" / f"mlx5_{i}").mkdir(parents=True)
    return sys_root


def test_hgx_h100_devices(hgx_sysfs):
    c, g = run("hgx-h100-8gpu.json", hgx_sysfs)
    assert c.status.status == "ok"
    assert_known_names(g)
    gpus = g.entities("gpu")
    assert [e.id for e in gpus] == [f"gpu:n1:0000:{b}:00.0" for b in H100_BUSES]  # NVML's 8-digit domain normalised
    g0 = g.entity("gpu:n1:0000:1b:00.0")
    m = g0.metrics
    assert m["util_pct"] == pytest.approx(98.0) and m["util_pct_max"] == 99
    assert m["mem_bw_util_pct"] == pytest.approx(59.67, abs=0.01)
    assert m["memory_total_bytes"] == 85520809984 and m["memory_used_pct"] == pytest.approx(92.8, abs=0.1)
    assert m["pcie_link_gen"] == 5 and m["pcie_link_gen_max"] == 5 and m["pcie_link_width"] == 16
    assert m["nvlink_links_up"] == 18 and m["nvlink_links"] == 18 and m["nvlink_links_down"] == 0
    assert m["nvlink_tx_bytes_per_s"] == pytest.approx(152e9, rel=1e-3)
    assert m["nvlink_util_pct"] == pytest.approx(152e9 / (18 * 25e9) * 100, rel=1e-3)
    assert m["power_limit_w"] == 700 and 600 < m["power_w"] < 660
    assert m["sm_clock_mhz"] == 1980 and m["mem_clock_mhz"] == 2619 and m["mem_clock_max_mhz"] == 2619
    assert m["throttle_thermal"] == 0 and m["throttle_power"] == 0 and m["ecc_errors_total"] == 0
    assert g0.attrs["numa_node"] == 0 and g0.attrs["local_cpus"] == "0-55,112-167"
    assert g0.attrs["pcie_link_degraded"] is False and g0.attrs["driver_version"] == "535.129.03"
    assert g0.attrs["name"] == "NVIDIA H100 80GB HBM3" and g0.attrs["nvlink_version"] == 6

    hot = g.entity("gpu:n1:0000:d1:00.0")
    assert hot.metrics["throttle_thermal"] == 1 and "sw_thermal_slowdown" in hot.attrs["throttle_reasons"]
    assert hot.metrics["temperature_c_max"] == 86 + 0  # GPU 6 runs hot
    assert g.entity("gpu:n1:0000:52:00.0").metrics["throttle_power"] == 1
    slow = g.entity("gpu:n1:0000:61:00.0")  # the rank that waits: lower SM and HBM activity
    assert slow.metrics["util_pct"] < 60 and slow.metrics["nvlink_tx_bytes_per_s"] < 100e9
    assert slow.metrics["xid_errors_total"] == 1 and slow.attrs["xid_codes"] == [74]  # an NVLink error
    # ... and it lost link 17: 17 of its 18 links up, the utilisation counted over the 17 left
    links = [slow.metrics[k] for k in ("nvlink_links", "nvlink_links_up", "nvlink_links_down")]
    assert links == [18, 17, 1]
    assert slow.metrics["nvlink_util_pct"] == pytest.approx(
        100 * max(slow.metrics["nvlink_tx_bytes_per_s"], slow.metrics["nvlink_rx_bytes_per_s"]) / (17 * 25e9), abs=0.01)
    assert m["xid_errors_total"] == 0 and "xid_codes" not in g0.attrs


def test_hgx_h100_edges(hgx_sysfs):
    _, g = run("hgx-h100-8gpu.json", hgx_sysfs)
    uses = g.edges("uses_device")
    assert len(uses) == 8
    u0 = next(e for e in uses if e.target == "gpu:n1:0000:1b:00.0")
    assert u0.source == "process:n1:52001" and u0.attrs["pid"] == 52001
    assert u0.metrics["memory_used_bytes"] == (75690 - 512) * 1024 * 1024
    links = g.edges("device_link")
    assert len(links) == 28 and {e.attrs["link_type"] for e in links} == {"NV18", "NV17"}
    assert {e.source for e in links if e.attrs["link_type"] == "NV17"} | {
        e.target for e in links if e.attrs["link_type"] == "NV17"} >= {"gpu:n1:0000:61:00.0"}
    assert sum(e.attrs["link_type"] == "NV17" for e in links) == 7  # every pair with the GPU that lost a link
    assert {e.attrs["via"] for e in links} == {"nvswitch"}
    near = {e.source: (e.target, e.attrs["link_type"]) for e in g.edges("near_nic")}
    assert near["gpu:n1:0000:1b:00.0"] == ("nic:n1:ibp28s0", "PIX")
    assert g.entity("nic:n1:ibp28s0").attrs["numa_node"] == 0
    local = {e.source: e.target for e in g.edges("local_to")}
    assert local["gpu:n1:0000:df:00.0"] == "numa_node:n1:1"
    assert ("gpu:n1:0000:9d:00.0", "pci_device:n1:0000:9d:00.0") in {(e.source, e.target) for e in g.edges("pci_function")}


def test_pcie_only_l4(tmp_path):
    sys_root = tmp_path / "sys"
    add_pci(sys_root, "pci0000:00", ["0000:00:01.0"], "0000:01:00.0", cls="0x030200", numa=0, cpulist="0-15,32-47",
            speed="16.0 GT/s PCIe", max_speed="16.0 GT/s PCIe")
    add_pci(sys_root, "pci0000:80", ["0000:80:01.0"], "0000:81:00.0", cls="0x030200", numa=1, cpulist="16-31,48-63",
            speed="2.5 GT/s PCIe", max_speed="16.0 GT/s PCIe")
    nic = add_pci(sys_root, "pci0000:00", ["0000:00:03.0"], "0000:03:00.0", cls="0x020000", vendor="0x8086",
                  device="0x1592", numa=0, cpulist="0-15,32-47")
    add_netdev(nic, "ens3f0")
    c, g = run("pcie-2x-l4.json", sys_root)
    # Ada GPUs answer nvmlGpmQueryDeviceSupport with isSupportedDevice 0: everything else is there
    assert c.status.status == "partial"
    assert c.status.reason.startswith("GPM not supported on 2x NVIDIA L4 (pre-Hopper): SM activity")
    assert_known_names(g)
    busy, idle = g.entity("gpu:n1:0000:01:00.0"), g.entity("gpu:n1:0000:81:00.0")
    assert busy.metrics["util_pct"] == pytest.approx(45.0) and "nvlink_links_up" not in busy.metrics
    assert "nvlink_links" not in busy.metrics  # NVLinkState answers NOT_SUPPORTED: no NVLink at all
    assert busy.metrics["mem_clock_mhz"] == 6251 and idle.metrics["mem_clock_mhz"] == 405
    assert idle.metrics["mem_clock_max_mhz"] == 6251
    assert busy.metrics["pcie_rx_bytes_per_s"] == pytest.approx(112666.67 * 1024, rel=1e-4)
    assert busy.metrics["pcie_util_pct"] < 1
    assert idle.metrics["util_pct"] == 0 and idle.attrs["throttle_reasons"] == ["gpu_idle"]
    # the idle L4 dropped to Gen1 to save power: not reported as a degraded link
    assert idle.metrics["pcie_link_gen"] == 1 and idle.attrs["pcie_link_degraded"] is False
    assert idle.metrics["throttle_power"] == 0 and idle.metrics["power_limit_w"] == 72
    (link,) = g.edges("device_link")
    assert link.attrs == {"link_type": "SYS", "via": "pcie"}
    assert [(e.source, e.target) for e in g.edges("uses_device")] == [("process:n1:3121", busy.id)]
    near = {e.source: e.attrs["link_type"] for e in g.edges("near_nic")}
    assert near == {busy.id: "PHB", idle.id: "SYS"}


def test_gpu_link_rules():
    a = {"pci": "0000:01:00.0", "nvlinks": [("0000:02:00.0", 0)] * 4}
    b = {"pci": "0000:02:00.0", "nvlinks": [("0000:01:00.0", 0)] * 4}
    assert gpu_link(a, b, 30) == {"link_type": "NV4", "nvlinks": 4, "via": "nvlink"}
    assert gpu_link({"pci": "x", "nvlinks": []}, {"pci": "y", "nvlinks": []}, 20) == {"link_type": "PXB", "via": "pcie"}
    assert gpu_link({"pci": "x", "nvlinks": []}, {"pci": "y", "nvlinks": []}, None) is None


@pytest.mark.live
def test_no_nvml_on_this_host():
    """This machine has no NVIDIA driver: the real NVML path reports why."""
    if Path("/proc/driver/nvidia").exists():
        pytest.skip("this host has an NVIDIA driver")
    c = GpuCollector(Context(host="me"))
    c.start()
    g = c.finish()
    assert len(g) == 0 and c.status.status == "unavailable"
    assert "NVML library not found" in c.status.reason


def test_nvlink_rates_cover_every_nvml_version():
    """NVLINK_BYTES_PER_S is keyed by nvmlNvlinkVersion_t, whose values are not the version numbers
    (3 is NVLink 2.2, 6 is 4.0): every version the installed nvidia-ml-py defines has a rate."""
    pynvml = pytest.importorskip("pynvml")
    versions = {name: getattr(pynvml, name) for name in dir(pynvml) if name.startswith("NVML_NVLINK_VERSION_")}
    assert versions["NVML_NVLINK_VERSION_4_0"] == 6 and versions["NVML_NVLINK_VERSION_5_0"] == 7
    assert {v for n, v in versions.items() if n != "NVML_NVLINK_VERSION_INVALID"} <= set(NVLINK_BYTES_PER_S)
    assert NVLINK_BYTES_PER_S[versions["NVML_NVLINK_VERSION_4_0"]] == 25e9  # H100: 18 links, 900 GB/s both ways
    assert MAX_NVLINKS >= getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)


def test_hgx_gpu_that_lost_a_nvlink_is_found(hgx_sysfs):
    """From the recording to the finding: the straggler's inactive link 17 and its XID 74."""
    from witty_profiler.diagnosis import diagnose
    _, g = run("hgx-h100-8gpu.json", hgx_sysfs)
    f = diagnose(g).finding("interconnect.pcie_link_degraded")
    assert f is not None and f.severity == "warning" and f.subjects == ["gpu:n1:0000:61:00.0"]
    assert "has 17 of 18 NVLink links up" in f.description
    assert {e.metric for e in f.evidence} >= {"link_capacity_pct", "nvlink_links_down", "nvlink_links_up", "xid_codes"}


@pytest.mark.parametrize("recording", ["hgx-h100-8gpu.json", "pcie-2x-l4.json"])
def test_recording_a_replay_gives_the_same_answers(recording, hgx_sysfs, tmp_path):
    """RecordingNvml writes what it is answered in RecordedNvml's format: recording the replay of a
    fixture and replaying that gives the collector the same answers, hence the same graph, and
    recording it once more gives the same recording."""
    from witty_profiler.collectors.lib.nvml import RecordingNvml
    from witty_profiler.topology.io import dumps_graph

    def window(nvml):
        c = GpuCollector(Context(host="n1", sys=hgx_sysfs), nvml=nvml)
        c.start()
        c.sample()
        return c, c.finish()

    recorder = RecordingNvml(RecordedNvml(FIXTURES / recording), source="a replay")
    _, through_recorder = window(recorder)
    copy = tmp_path / "copy.json"
    copy.write_text(json.dumps(recorder.recording(), indent=1))
    again = RecordingNvml(RecordedNvml(copy))
    c, replayed = window(again)
    assert c.status.status == ("ok" if recording.startswith("hgx") else "partial")
    _, direct = run(recording, hgx_sysfs)
    assert dumps_graph(replayed) == dumps_graph(through_recorder) == dumps_graph(direct)
    first, second = recorder.recording(), again.recording()
    assert {k: v for k, v in second.items() if k != "source"} == {k: v for k, v in first.items() if k != "source"}


def test_recorder_keeps_errors_and_ctypes_answers():
    """Live answers are ctypes structs, unions and arrays; errors are kept by name and raised again."""
    import ctypes

    import pynvml as nvml_module

    from witty_profiler.collectors.lib.nvml import RecordingNvml, to_json

    pynvml = nvml_module

    class Live:
        pynvml = nvml_module

        def system(self, fn):
            return b"535.129.03" if fn == "nvmlSystemGetDriverVersion" else 1

        def call(self, fn, index, *args):
            if fn == "nvmlDeviceGetFieldValues":
                values = (pynvml.c_nvmlFieldValue_t * 1)()
                values[0].fieldId, values[0].nvmlReturn, values[0].timestamp = 138, 0, 5
                values[0].value.ullVal = 1234
                return values
            if fn == "nvmlDeviceGetUtilizationRates":
                return pynvml.c_nvmlUtilization_t(gpu=40, memory=7)
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

        def xid_events(self, indices):
            return [(0, 79)]

        def close(self):
            pass

    rec = RecordingNvml(Live())
    assert rec.system("nvmlSystemGetDriverVersion") == b"535.129.03"
    rec.call("nvmlDeviceGetUtilizationRates", 0)
    rec.call("nvmlDeviceGetFieldValues", 0, [(138, 0)])
    with pytest.raises(pynvml.NVMLError):
        rec.call("nvmlDeviceGetNvLinkState", 0, 0)
    rec.xid_events([0])
    data = rec.recording()
    assert data["nvmlSystemGetDriverVersion"] == ["535.129.03"] and data["xid_events"] == [[[0, 79]]]
    dev = data["devices"][0]
    assert dev["nvmlDeviceGetUtilizationRates"] == [{"gpu": 40, "memory": 7}]
    (field,) = dev["nvmlDeviceGetFieldValues([(138, 0)])"][0]
    assert field["fieldId"] == 138 and field["value"]["ullVal"] == 1234
    assert dev["nvmlDeviceGetNvLinkState(0)"] == [{"nvml_error": "NVML_ERROR_NOT_SUPPORTED"}]
    assert to_json(ctypes.c_uint(7)) == 7 and to_json(float("nan")) is None


def test_record_nvml_window_without_samples(hgx_sysfs, tmp_path):
    """benchmarks.record_nvml's window, with no interval: start and finish only."""
    from benchmarks.record_nvml import describe, record

    recording, collector, graph = record(RecordedNvml(FIXTURES / "pcie-2x-l4.json"), 0.0, 0.0, sys_root=hgx_sysfs)
    assert collector.status.status == "partial" and len(graph.entities("gpu")) == 2
    assert describe(recording).startswith("2x NVIDIA L4, driver 550.54.15, recorded ")
    path = tmp_path / "l4.json"
    path.write_text(json.dumps(recording))
    c = GpuCollector(Context(host="recorded", sys=hgx_sysfs), nvml=RecordedNvml(path))
    c.start()
    assert dumps(c.finish()) == dumps(graph)


def dumps(graph):
    from witty_profiler.topology.io import dumps_graph
    return dumps_graph(graph)
