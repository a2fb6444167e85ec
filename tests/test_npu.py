"""NPU collector: parsers on recorded npu-smi outputs of three Ascend generations, the collector end
to end through a fake npu-smi on PATH, and this host (no npu-smi)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from witty_profiler.collectors.base import Context
from witty_profiler.collectors.npu import (
    NpuCollector,
    parse_hccs,
    parse_hccs_bw,
    parse_info,
    parse_kv,
    parse_per_chip,
    parse_topo,
)

from graph_checks import assert_known_names
from sysfs_tree import add_pci, write

FIXTURES = Path(__file__).parent / "fixtures" / "npu"
A2_BUSES = ["c1", "c2", "81", "82", "01", "02", "41", "42"]


def text(gen: str, name: str) -> str:
    return (FIXTURES / gen / name).read_text()


def test_parse_info_910b():
    info = parse_info(text("910b", "info.txt"))
    assert info["version"] == "23.0.6" and len(info["chips"]) == 8
    c0 = info["chips"][0]
    assert c0["npu"] == 0 and c0["chip"] == 0 and c0["name"] == "910B3" and c0["health"] == "OK"
    assert c0["bus_id"] == "0000:c1:00.0" and c0["power"] == 312.4 and c0["temp"] == 46 and c0["aicore"] == 92
    assert (c0["hbm_usage_used"], c0["hbm_usage_total"]) == (61320, 65536)  # '61320/ 65536', no space
    assert info["chips"][4]["hbm_usage_used"] == 3362  # '3362 / 65536'
    assert [(p["npu"], p["pid"], p["memory_mb"]) for p in info["processes"]][:2] == [(0, 2915530, 57940), (1, 2915531, 57948)]
    assert len(info["processes"]) == 4  # 'No running processes found in NPU 4..7' rows are skipped


def test_parse_info_310p_chip_device_columns():
    info = parse_info(text("310p", "info.txt"))
    assert info["version"] == "23.0.0" and len(info["chips"]) == 4
    c = info["chips"][1]
    # both chips of a Duo card print the card's Bus-Id; the second reports a little less memory
    assert (c["npu"], c["chip"], c["device"]) == (1, 1, 1) and c["bus_id"] == "0000:82:00.0"
    assert [ch["bus_id"] for ch in info["chips"]] == ["0000:82:00.0"] * 2 + ["0000:05:00.0"] * 2
    assert c["power"] is None and c["aicore"] == 41  # 'NA' power on the 310P
    assert (c["memory_usage_used"], c["memory_usage_total"]) == (20960, 43693) and "hbm_usage_total" not in c
    assert [(p["npu"], p["chip"], p["pid"]) for p in info["processes"]] == [(1, 0, 40321), (1, 1, 40322)]


def test_parse_info_a3_phy_id_and_dashes():
    info = parse_info(text("a3", "info.txt"))
    assert [(c["npu"], c["chip"], c["phy_id"]) for c in info["chips"]] == [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3)]
    assert info["chips"][1]["power"] is None and info["chips"][3]["aicore"] is None  # '-' and 'NA'
    assert info["chips"][2]["health"] == "Warning"
    assert [p["name"] for p in info["processes"]] == ["VLLM::Worker_TP0", "VLLM::Worker_TP1"]


def test_parse_kv_and_per_chip():
    board = {k: v for b in parse_kv(text("910b", "info_t_board_i_0.txt")) for k, v in b.items()}
    assert board["PCIe Bus Info"] == "0000:C1:00.0" and board["PCI Device ID"] == "0xD802"
    usages = parse_per_chip(text("910b", "info_t_usages_i_0.txt"))  # Chip ID at the end of the block
    assert list(usages) == [0] and usages[0]["HBM Bandwidth Usage Rate(%)"] == "61"
    duo = parse_per_chip(text("310p", "info_t_usages_i_1.txt"))  # Chip ID first, two chips
    assert list(duo) == [0, 1] and duo[1]["Memory Bandwidth Usage Rate(%)"] == "19"


def test_parse_topo():
    names, links, affinity = parse_topo(text("910b", "info_t_topo.txt"))
    assert names == [f"NPU{i}" for i in range(8)] and len(links) == 56
    assert set(links.values()) == {"HCCS"} and affinity["NPU0"] == "144-167" and affinity["NPU7"] == "48-71"
    names, links, affinity = parse_topo(text("310p", "info_t_topo.txt"))
    assert links[("NPU0", "NPU1")] == "PIX" and links[("NPU1", "NPU2")] == "SYS" and affinity["NPU3"] == "0-31"


def test_parse_hccs_bw_and_links():
    bw = parse_hccs_bw(text("910b", "info_t_hccsbw_i_0_c_0_time_100.txt"))
    assert sorted(bw["links"]) == list(range(1, 8))  # the 7 links of a 910B in an 8-NPU mesh
    assert bw["links"][1] == {"tx": pytest.approx(9.612345e9), "rx": pytest.approx(9.414111e9)}  # GB/S, tx first
    assert bw["tx_bytes_per_s"] == pytest.approx(28.653106e9) and bw["rx_bytes_per_s"] == pytest.approx(28.433710e9)
    # the column order comes from the header, not from habit
    swapped = parse_hccs_bw("hccs link  rx_bandwidth(GB/S)  tx_bandwidth(GB/S)\n1  2.0  5.0\ntotal  2.0  5.0\n")
    assert swapped["tx_bytes_per_s"] == 5e9 and swapped["rx_bytes_per_s"] == 2e9
    assert parse_hccs_bw(text("310p", "info_t_hccsbw_i_1_c_0_time_100.txt")) is None  # "does not support"
    links = parse_hccs(text("910b", "info_t_hccs_i_3_c_0.txt"))
    assert links["health"] == "NOK" and links["lanes"] == [4, 4, 4, 0, 4, 4, 4]
    assert links["speed_gbps"] == [224, 224, 224, 0, 224, 224, 224]  # 56 Gbit/s a lane
    assert parse_hccs(text("910b", "info_t_hccs_i_0_c_0.txt"))["health"] == "OK"
    assert parse_hccs(text("310p", "info_t_hccs_i_1_c_0.txt")) is None  # packet counters only


@pytest.fixture()
def fake_npu_smi(tmp_path, monkeypatch):
    """Put the recording player on PATH as `npu-smi`, for the generation the test asks for."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(FIXTURES / "npu-smi", bin_dir / "npu-smi")
    os.symlink(FIXTURES / "hccn_tool", bin_dir / "hccn_tool")
    calls = tmp_path / "hccn_calls"
    calls.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HCCN_TOOL_CALLS", str(calls))

    def use(gen: str) -> None:
        monkeypatch.setenv("NPU_SMI_FIXTURE", str(FIXTURES / gen))
        monkeypatch.setenv("HCCN_TOOL_FIXTURE", str(FIXTURES / gen / "hccn"))
    return use


def run(ctx: Context) -> tuple[NpuCollector, object]:
    c = NpuCollector(ctx)
    c.start()
    c.sample()
    return c, c.finish()


def test_atlas_800t_a2_end_to_end(fake_npu_smi, tmp_path):
    fake_npu_smi("910b")
    sys_root = tmp_path / "sys"
    for i, bus in enumerate(A2_BUSES):
        node = [6, 6, 4, 4, 0, 0, 2, 2][i]
        add_pci(sys_root, f"pci0000:{int(bus, 16) - 1:02x}", [f"0000:{int(bus, 16) - 1:02x}:00.0"], f"0000:{bus}:00.0",
                cls="0x120000", vendor="0x19e5", device="0xd802", numa=node, cpulist="",
                speed="16.0 GT/s PCIe", max_speed="16.0 GT/s PCIe", width=16, max_width=16)
    c, g = run(Context(host="a2", sys=sys_root))
    assert c.status.status == "ok", c.status.reason
    assert_known_names(g)
    npus = g.entities("npu")
    assert [e.id for e in npus] == sorted(f"npu:a2:0000:{b}:00.0" for b in A2_BUSES)
    n0 = g.entity("npu:a2:0000:c1:00.0")
    assert n0.attrs["index"] == 0 and n0.attrs["name"] == "910B3" and n0.attrs["health"] == "OK"
    assert n0.attrs["cpu_affinity"] == "144-167" and n0.attrs["numa_node"] == 6
    assert n0.attrs["firmware_version"] == "7.1.0.5.220"
    m = n0.metrics
    assert m["util_pct"] == 92 and m["mem_bw_util_pct"] == 61 and m["temperature_c"] == 46 and m["power_w"] == 312.4
    assert m["memory_used_bytes"] == 61320 * 2**20 and m["memory_total_bytes"] == 65536 * 2**20
    assert m["memory_used_pct"] == pytest.approx(93.57, abs=0.01)
    assert m["sm_clock_mhz"] == 1800 and m["sm_clock_max_mhz"] == 1800
    idle = g.entity("npu:a2:0000:01:00.0")
    assert idle.metrics["util_pct"] == 0 and idle.metrics["sm_clock_mhz"] == 800 and idle.attrs["numa_node"] == 0
    uses = g.edges("uses_device")
    assert [(e.source, e.target, e.attrs["pid"]) for e in uses][0] == ("process:a2:2915530", n0.id, 2915530)
    assert {e.target for e in uses} == {f"npu:a2:0000:{b}:00.0" for b in A2_BUSES[:4]}
    assert uses[0].metrics["memory_used_bytes"] == 57940 * 2**20
    links = g.edges("device_link")
    assert len(links) == 28 and {e.attrs["link_type"] for e in links} == {"HCCS"}
    local = {e.source: e.target for e in g.edges("local_to")}
    assert local[n0.id] == "numa_node:a2:6"
    # HCCS: -t hccs gives the links and their speed, -t hccs-bw the throughput at both ends of the window
    assert (m["nvlink_links"], m["nvlink_links_up"], m["nvlink_links_down"]) == (7, 7, 0)
    assert m["nvlink_tx_bytes_per_s"] == pytest.approx(28.653106e9)
    assert m["nvlink_rx_bytes_per_s"] == pytest.approx(28.43371e9)
    assert m["nvlink_util_pct"] == pytest.approx(100 * 28.653106e9 / (7 * 224e9 / 8), abs=0.01)
    assert n0.attrs["hccs_health"] == "OK" and idle.metrics["nvlink_util_pct"] == 0
    lost = g.entity("npu:a2:0000:82:00.0")  # NPU 3: its link 4 did not train
    assert (lost.metrics["nvlink_links_up"], lost.metrics["nvlink_links_down"]) == (6, 1)
    assert lost.attrs["hccs_health"] == "NOK"
    assert lost.metrics["nvlink_util_pct"] == pytest.approx(100 * 28.652694e9 / (6 * 224e9 / 8), abs=0.01)


def test_atlas_300i_duo_end_to_end(fake_npu_smi, tmp_path):
    """No PCI tree for the chips here: the NUMA node comes from the topo table's CPU affinity."""
    fake_npu_smi("310p")
    sys_root = tmp_path / "sys"
    write(sys_root / "devices" / "system" / "node" / "node0" / "cpulist", "0-31")
    write(sys_root / "devices" / "system" / "node" / "node1" / "cpulist", "32-63")
    c, g = run(Context(host="duo", sys=sys_root))
    assert c.status.status == "ok", c.status.reason
    chip = g.entity("npu:duo:0000:82:00.0:1")
    assert chip.attrs["chip"] == 1 and chip.attrs["device"] == 1 and chip.attrs["numa_node"] == 1
    assert chip.metrics["util_pct"] == 41 and chip.metrics["mem_bw_util_pct"] == 19
    assert chip.metrics["memory_used_bytes"] == 20960 * 2**20 and "power_w" not in chip.metrics
    kinds = {(e.source, e.target): e.attrs["link_type"] for e in g.edges("device_link")}
    assert kinds[("npu:duo:0000:82:00.0", "npu:duo:0000:82:00.0:1")] == "PIX"
    assert kinds[("npu:duo:0000:82:00.0:1", "npu:duo:0000:05:00.0")] == "SYS"
    assert {e.source for e in g.edges("uses_device")} == {"process:duo:40321", "process:duo:40322"}
    # no HCCS figures on the 310P: its `-t hccs` has packet counters only and `-t hccs-bw` is refused,
    # which leaves the metrics out without making the collector partial
    assert not any(k.startswith("nvlink_") for e in g.entities("npu") for k in e.metrics)
    assert c.unsupported == {"hccs", "hccs-bw"}


def test_duo_chips_sharing_a_bus_id_are_two_npus_with_stable_ids(fake_npu_smi, tmp_path):
    """npu-smi prints one Bus-Id for the two chips of an Atlas 300I Duo card: each chip is its own
    entity, the first keeping the bare address, with its own memory, and the ids do not change
    from one collection to the next."""
    fake_npu_smi("310p")
    ids = []
    for _ in range(2):
        c, g = run(Context(host="duo", sys=tmp_path))
        assert c.status.status == "ok", c.status.reason
        ids.append([e.id for e in g.entities("npu")])
    assert ids[0] == ids[1] == ["npu:duo:0000:05:00.0", "npu:duo:0000:05:00.0:1",
                                "npu:duo:0000:82:00.0", "npu:duo:0000:82:00.0:1"]
    first, second = g.entity("npu:duo:0000:82:00.0"), g.entity("npu:duo:0000:82:00.0:1")
    assert (first.attrs["chip"], second.attrs["chip"]) == (0, 1)
    assert first.attrs["pci_address"] == second.attrs["pci_address"] == "0000:82:00.0"
    assert (first.metrics["memory_used_bytes"], first.metrics["memory_total_bytes"]) == (21380 * 2**20, 44280 * 2**20)
    assert (second.metrics["memory_used_bytes"], second.metrics["memory_total_bytes"]) == (20960 * 2**20, 43693 * 2**20)
    assert second.metrics["memory_used_pct"] == pytest.approx(100 * 20960 / 43693, abs=0.01)
    assert first.metrics["util_pct"] == 76 and second.metrics["util_pct"] == 41
    users = {e.attrs["pid"]: e.target for e in g.edges("uses_device")}
    assert users == {40321: first.id, 40322: second.id}  # the process table's Chip column picks the chip


def test_a3_table_without_other_recordings_is_partial(fake_npu_smi, tmp_path):
    """Only the table was recorded for the A3: the collector keeps what it read and says what failed."""
    fake_npu_smi("a3")
    c, g = run(Context(host="a3", sys=tmp_path))
    assert c.status.status == "partial" and "npu-smi info -t topo exited 255" in c.status.reason
    assert len(g.entities("npu")) == 4 and g.entity("npu:a3:0000:9f:00.0").metrics["util_pct"] == 61


@pytest.mark.live
def test_no_npu_smi_on_this_host(monkeypatch, tmp_path):
    if shutil.which("npu-smi"):
        pytest.skip("this host has npu-smi")
    c = NpuCollector(Context(host="me"))
    c.start()
    g = c.finish()
    assert len(g) == 0 and c.status.status == "unavailable" and "npu-smi not found on PATH" in c.status.reason
