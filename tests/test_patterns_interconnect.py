"""Layer 3 patterns on hand-built graphs: at, just below and just above every threshold, and the
NUMA placement cases."""

from __future__ import annotations

import pytest

from witty_profiler.diagnosis import diagnose
from witty_profiler.diagnosis.catalog import catalog

from diagnosis_graphs import (
    allocates_on,
    assert_threshold,
    device,
    linked_devices,
    new_graph,
    numa,
    process,
    runs_on,
    thread,
    threshold_cases,
    two_numa_host,
    uses,
)


def cross_numa(v):
    g = new_graph()
    two_numa_host(g)
    process(g, 10, "train")
    thread(g, 10, 10)
    runs_on(g, 10, 10, 1, 1e9)
    allocates_on(g, 10, 0, v * 100)
    allocates_on(g, 10, 1, (100 - v) * 100)
    return g


def mismatch_runtime(v):
    g = new_graph()
    two_numa_host(g)
    process(g, 10, "train")
    uses(g, 10, device(g, "gpu", "0000:3b:00.0", 0, numa_node=0))
    thread(g, 10, 10)
    thread(g, 10, 11)
    runs_on(g, 10, 10, 1, v * 1e7)
    runs_on(g, 10, 11, 0, (100 - v) * 1e7)
    allocates_on(g, 10, 0, 1000)
    return g


def mismatch_pages(v):
    g = new_graph()
    two_numa_host(g)
    process(g, 10, "train")
    uses(g, 10, device(g, "gpu", "0000:3b:00.0", 0, numa_node=0))
    thread(g, 10, 10)
    runs_on(g, 10, 10, 0, 1e9)
    allocates_on(g, 10, 1, v * 100)
    allocates_on(g, 10, 0, (100 - v) * 100)
    return g


def pcie(v):
    g = new_graph()
    process(g, 10, "train")
    uses(g, 10, device(g, "gpu", "0000:3b:00.0", 0, pcie_util_pct=v))
    return g


def link(v):
    g = new_graph()
    g.entity_of("pci_device", "pci_device:h1:0000:3b:00.0", {"class": "0x030200"},
                {"link_speed_gts": 16.0 * v / 100, "link_speed_max_gts": 16.0, "link_width": 16, "link_width_max": 16,
                 "util_pct": 50.0})
    return g


def nvlink(v):
    g = new_graph()
    process(g, 10, "train")
    uses(g, 10, device(g, "gpu", "0000:3b:00.0", 0, nvlink_util_pct=v))
    return g


BUILDERS = {
    ("interconnect.cross_numa_access", "remote_access_pct"): cross_numa,
    ("interconnect.device_numa_mismatch", "remote_runtime_pct"): mismatch_runtime,
    ("interconnect.device_numa_mismatch", "remote_pages_pct"): mismatch_pages,
    ("interconnect.pcie_bottleneck", "pcie_util_pct"): pcie,
    ("interconnect.pcie_link_degraded", "link_capacity_pct"): link,
    ("interconnect.nvlink_contention", "nvlink_util_pct"): nvlink,
}


def test_every_threshold_of_the_layer_has_a_builder():
    assert {(p.id, t.name) for p in catalog().values() if p.layer == 3 for t in p.thresholds} == set(BUILDERS)


@pytest.mark.parametrize("pattern, name, level, limit, direction", threshold_cases(3))
def test_threshold(pattern, name, level, limit, direction):
    assert_threshold(BUILDERS[(pattern, name)], pattern, level, limit, direction)


def test_mismatch_evidence_names_device_node_allowed_cpus_pages_and_distance():
    g = mismatch_runtime(100.0)
    g.entity("process:h1:10").attrs["cpus_allowed"] = "4-7"
    f = diagnose(g).finding("interconnect.device_numa_mismatch")
    by_metric = {e.metric: e for e in f.evidence}
    assert by_metric["numa_node"].value == 0 and by_metric["numa_node"].kind == "edge"
    assert by_metric["cpus_allowed"].value == "4-7" and "NUMA node 1" in by_metric["cpus_allowed"].note
    assert by_metric["remote_runtime_pct"].value == 100.0
    assert by_metric["remote_pages_pct"].value == 0.0 and "0: 1000" in by_metric["remote_pages_pct"].note
    assert by_metric["numa_distance"].value == 21 and by_metric["numa_distance"].ids == [
        "numa_distance|numa_node:h1:1|numa_node:h1:0"]
    assert "runs on node 1" in f.description


def test_mismatch_inferred_from_allowed_cpus_without_run_time():
    g = new_graph()
    two_numa_host(g)
    process(g, 10, "train", attrs={"cpus_allowed": "4-7"})
    uses(g, 10, device(g, "npu", "0000:c1:00.0", 0, numa_node=0))
    f = diagnose(g).finding("interconnect.device_numa_mismatch")
    assert f.severity == "critical" and "may only run on node 1." in f.description


def test_sibling_nodes_lower_a_critical_mismatch_to_warning():
    g = new_graph()
    numa(g, 0, "0-3", {0: 10, 1: 11})
    numa(g, 1, "4-7", {0: 11, 1: 10})
    process(g, 10, "train", attrs={"cpus_allowed": "4-7"})
    uses(g, 10, device(g, "npu", "0000:c1:00.0", 0, numa_node=0))
    assert diagnose(g).finding("interconnect.device_numa_mismatch").severity == "warning"


def test_well_placed_worker_is_clear_and_unknown_device_node_is_not_evaluated():
    g = mismatch_runtime(0.0)
    assert diagnose(g).status("interconnect.device_numa_mismatch") == "clear"
    g = new_graph()
    two_numa_host(g)
    process(g, 10, "train", attrs={"cpus_allowed": "4-7"})
    uses(g, 10, device(g, "gpu", "0000:3b:00.0", 0))
    row = next(c for c in diagnose(g).coverage if c.pattern == "interconnect.device_numa_mismatch")
    assert row.status == "not_evaluated" and "without a known NUMA node" in row.reason


def test_idle_device_at_reduced_speed_is_power_saving_not_degraded():
    g = link(50.0)
    g.entity("pci_device:h1:0000:3b:00.0").metrics["util_pct"] = 0.0
    d = diagnose(g)
    assert d.status("interconnect.pcie_link_degraded") == "clear"
    assert "power saving" in next(c.reason for c in d.coverage if c.pattern == "interconnect.pcie_link_degraded")
    g.entity("pci_device:h1:0000:3b:00.0").metrics.update(link_speed_gts=16.0, link_width=8)  # lanes lost
    assert diagnose(g).finding("interconnect.pcie_link_degraded").severity == "warning"


def test_cross_numa_on_the_whole_host_uses_node_allocation_rates():
    g = new_graph()
    numa(g, 0, "0-3", {0: 10}, numa_remote_alloc_pct=45.0)
    assert diagnose(g).finding("interconnect.cross_numa_access").severity == "warning"


def nvlinks(v):
    """A GPU with v % of the NVLinks up that its peer of the same model has (no GPU has more than the
    best of its peers: past 100 % it is the best one)."""
    g = new_graph(collectors={"process": "ok", "gpu": "ok"})
    linked_devices(g, "gpu", "NVIDIA H100 80GB HBM3", [1000.0, min(v, 100.0) * 10])
    return g


@pytest.mark.parametrize("level, limit", [("warning", 100.0), ("critical", 50.0)])
def test_nvlink_links_threshold(level, limit):
    """The link_capacity_pct levels apply to NVLink: links up against the best peer of the same model."""
    assert_threshold(nvlinks, "interconnect.pcie_link_degraded", level, limit, "below")


def test_gpu_that_lost_a_nvlink_is_degraded_with_its_peers_and_xid_as_evidence():
    g = new_graph(collectors={"process": "ok", "gpu": "ok"})
    ids = linked_devices(g, "gpu", "NVIDIA H100 80GB HBM3", [18, 18, 18, 17], links=18)
    g.entity(ids[3]).attrs["xid_codes"] = [74]
    f = diagnose(g).finding("interconnect.pcie_link_degraded")
    assert f.severity == "warning" and f.subjects == [ids[3]]
    assert "GPU3 (0000:1e:00.0) has 17 of 18 NVLink links up" in f.description
    by_metric = {e.metric: e for e in f.evidence}
    assert by_metric["link_capacity_pct"].value == pytest.approx(100 * 17 / 18)
    assert by_metric["link_capacity_pct"].threshold == "< 100"
    assert by_metric["nvlink_links_down"].value == 1 and by_metric["nvlink_links_down"].ids == [ids[3]]
    assert by_metric["nvlink_links_up"].kind == "statistic" and by_metric["nvlink_links_up"].ids == ids[:3]
    assert by_metric["xid_codes"].value == [74]


def test_gpu_with_no_nvlink_left_is_critical():
    g = new_graph(collectors={"process": "ok", "gpu": "ok"})
    ids = linked_devices(g, "gpu", "NVIDIA A100-SXM4-80GB", [12, 12, 0], links=12)
    f = diagnose(g).finding("interconnect.pcie_link_degraded")
    assert f.severity == "critical" and f.subjects == [ids[2]]


def test_nvlinks_equal_across_peers_are_clear_and_unwired_boards_are_not_judged():
    g = new_graph(collectors={"process": "ok", "gpu": "ok"})
    linked_devices(g, "gpu", "NVIDIA H100 80GB HBM3", [18, 18, 18, 18])
    d = diagnose(g)
    assert d.status("interconnect.pcie_link_degraded") == "clear"
    assert "4 devices with NVLink/HCCS links checked" in next(
        c.reason for c in d.coverage if c.pattern == "interconnect.pcie_link_degraded")
    # PCIe cards without bridges: NVML reports every link inactive on every GPU; nothing to compare
    g = new_graph(collectors={"process": "ok", "gpu": "ok"})
    linked_devices(g, "gpu", "NVIDIA A100 80GB PCIe", [0, 0], links=12)
    assert diagnose(g).status("interconnect.pcie_link_degraded") == "not_evaluated"


def test_nvlink_peers_are_devices_of_the_same_model():
    g = new_graph(collectors={"process": "ok", "gpu": "ok"})
    linked_devices(g, "gpu", "NVIDIA H100 80GB HBM3", [18, 18])
    other = device(g, "gpu", "0000:c1:00.0", 7, nvlink_links=12, nvlink_links_up=4, nvlink_links_down=8)
    g.entity(other).attrs["name"] = "NVIDIA A100 80GB PCIe"  # bridged to one neighbour: 4 of its 12 links
    assert diagnose(g).status("interconnect.pcie_link_degraded") == "clear"


def test_npu_that_lost_an_hccs_link_is_degraded():
    g = new_graph(collectors={"process": "ok", "npu": "ok"})
    ids = linked_devices(g, "npu", "910B3", [7, 7, 7, 6], links=7)
    f = diagnose(g).finding("interconnect.pcie_link_degraded")
    assert f.subjects == [ids[3]] and "6 of 7 HCCS links up" in f.description


def test_contended_gpu_that_lost_links_says_so():
    g = new_graph(collectors={"process": "ok", "gpu": "ok"})
    process(g, 10, "train")
    gpu = device(g, "gpu", "0000:3b:00.0", 0, nvlink_util_pct=85.0, nvlink_links=18, nvlink_links_up=12,
                 nvlink_links_down=6)
    uses(g, 10, gpu)
    f = diagnose(g).finding("interconnect.nvlink_contention")
    down = next(e for e in f.evidence if e.metric == "nvlink_links_down")
    assert f.severity == "critical" and down.value == 6 and "12 NVLink links up" in down.note


def test_npus_without_hccs_figures_say_why():
    g = new_graph(collectors={"process": "ok", "npu": "ok"})
    process(g, 10, "mindie_llm_back", role="inference")
    uses(g, 10, device(g, "npu", "0000:82:00.0", 1, util_pct=41.0))
    row = next(c for c in diagnose(g).coverage if c.pattern == "interconnect.nvlink_contention")
    assert row.status == "not_evaluated"
    assert row.reason.startswith("no HCCS utilisation of the NPUs: npu-smi info -t hccs (link speeds) and -t hccs-bw")


def test_npu_hccs_utilisation_is_judged_like_nvlink():
    g = new_graph(collectors={"process": "ok", "npu": "ok"})
    process(g, 10, "vllm", role="inference")
    uses(g, 10, device(g, "npu", "0000:c1:00.0", 0, nvlink_util_pct=45.0))
    assert diagnose(g).finding("interconnect.nvlink_contention").severity == "warning"
