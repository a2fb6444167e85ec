"""Findings with one cause name each other in `related`, both ways, where the evidence shows the
same cause: I/O wait that is paging and the memory pressure behind it, I/O wait on a saturated
disk, run-queue wait on saturated CPUs or under the workload's own thread oversubscription, a
PCIe or NVLink bottleneck on a device whose links are degraded."""

from __future__ import annotations

import pytest

from witty_profiler.diagnosis import diagnose

from diagnosis_graphs import cgroup, device, host, new_graph, process, uses


def linked(d, a: str, b: str) -> bool:
    fa, fb = d.finding(a), d.finding(b)
    assert fa is not None and fb is not None, (a, d.status(a), b, d.status(b))
    return b in fa.related and a in fb.related


def unlinked(d, a: str, b: str) -> bool:
    fa, fb = d.finding(a), d.finding(b)
    return (fa is None or b not in fa.related) and (fb is None or a not in fb.related)


# -- I/O wait and memory pressure ---------------------------------------------------------------
def thrashing(**memory):
    g = new_graph()
    host(g, psi_io_some_pct=40.0, cpu_iowait_pct=5.0, **memory)
    process(g, 10, "train", cpu_util_pct=30.0)
    return g


@pytest.mark.parametrize("memory", [{"major_faults_per_s": 9000.0}, {"swap_in_pages_per_s": 800.0}],
                         ids=["major-faults", "swap"])
def test_io_wait_from_paging_relates_to_memory_pressure_both_ways(memory):
    d = diagnose(thrashing(**memory))
    assert linked(d, "storage.io_wait", "memory.pressure")
    io = d.finding("storage.io_wait")
    assert "paging" in io.description, io.description
    assert "memory.pressure" in io.recommendations[0], io.recommendations
    assert any(e.metric in ("major_faults_per_s", "swap_pages_per_s") for e in io.evidence), io.evidence


def test_io_wait_relates_to_the_major_faults_of_the_workloads_cgroup():
    g = thrashing()
    cgroup(g, "/jobs/train", members=(10,), major_faults_per_s=9000.0, memory_limit_bytes=16e6,
           memory_usage_bytes=16e6)
    assert linked(diagnose(g), "storage.io_wait", "memory.pressure")


def test_memory_stalls_without_paging_are_not_the_io_wait():
    d = diagnose(thrashing(psi_memory_some_pct=40.0, major_faults_per_s=10.0))  # reclaim stalls, no paging
    assert d.finding("memory.pressure") is not None and d.finding("storage.io_wait") is not None
    assert unlinked(d, "storage.io_wait", "memory.pressure")
    assert "paging" not in d.finding("storage.io_wait").description


def test_one_layer_still_names_the_finding_of_another_layer_it_explains():
    g = thrashing(major_faults_per_s=9000.0)
    assert "storage.io_wait" in diagnose(g, layer="memory").finding("memory.pressure").related
    assert "memory.pressure" in diagnose(g, layer="storage").finding("storage.io_wait").related


# -- I/O wait and a saturated disk --------------------------------------------------------------
def test_io_wait_on_a_saturated_disk_relates_to_the_disk_saturation():
    g = thrashing()
    g.entity_of("block_device", "block_device:h1:sda", {"name": "sda"}, {"disk_util_pct": 99.0, "await_ms": 80.0})
    d = diagnose(g)
    assert linked(d, "storage.io_wait", "storage.disk_saturation")
    g.entity("block_device:h1:sda").metrics["disk_util_pct"] = 40.0
    assert unlinked(diagnose(g), "storage.io_wait", "storage.disk_saturation")


# -- run-queue wait and the CPUs ----------------------------------------------------------------
def waiting_on_a_busy_host(cpu_util=98.0, **process_metrics):
    g = new_graph()
    host(g, cpu_util_pct=cpu_util)
    process(g, 10, "train", cpu_util_pct=10.0, runqueue_wait_pct=80.0, runqueue_wait_ms_per_s=400.0,
            runqueue_wait_per_slice_us=6000.0, **process_metrics)
    return g


@pytest.mark.parametrize("pattern", ["control.scheduling_latency", "compute.cpu_starvation"])
def test_waiting_for_a_cpu_on_saturated_cpus_relates_to_the_saturation(pattern):
    d = diagnose(waiting_on_a_busy_host())
    assert linked(d, pattern, "compute.cpu_saturation")
    assert "compute.cpu_saturation" in d.finding(pattern).description
    assert unlinked(diagnose(waiting_on_a_busy_host(cpu_util=50.0)), pattern, "compute.cpu_saturation")


def test_waiting_for_a_quota_on_a_busy_host_is_the_quota_not_the_saturation():
    g = waiting_on_a_busy_host()
    cgroup(g, "/jobs/train", members=(10,), cpu_quota_cores=0.1, throttled_periods_pct=100.0, throttled_ms_per_s=400.0)
    d = diagnose(g)
    assert linked(d, "control.scheduling_latency", "control.cpu_throttling")
    assert unlinked(d, "control.scheduling_latency", "compute.cpu_saturation")


def test_run_queue_wait_of_an_oversubscribed_workload_relates_to_the_oversubscription():
    g = waiting_on_a_busy_host(cpu_util=50.0, runnable_threads=12.0, num_threads=64.0)
    g.entity("process:h1:10").attrs["cpus_allowed"] = "0-1"
    d = diagnose(g)
    assert linked(d, "control.scheduling_latency", "control.thread_oversubscription")


# -- PCIe and NVLink on a degraded link ---------------------------------------------------------
def test_a_pcie_bottleneck_on_a_degraded_link_relates_to_the_degradation():
    g = new_graph()
    process(g, 10, "train")
    uses(g, 10, device(g, "gpu", "0000:3b:00.0", 0, pcie_util_pct=97.0, util_pct=80.0))
    g.entity_of("pci_device", "pci_device:h1:0000:3b:00.0", {"class": "0x030200"},
                {"link_speed_gts": 16.0, "link_speed_max_gts": 16.0, "link_width": 4, "link_width_max": 16})
    d = diagnose(g)
    assert linked(d, "interconnect.pcie_bottleneck", "interconnect.pcie_link_degraded")
    # a link degraded on another device is another cause
    g.entity("pci_device:h1:0000:3b:00.0").metrics["link_width"] = 16
    g.entity_of("pci_device", "pci_device:h1:0000:5e:00.0", {"class": "0x030200"},
                {"link_speed_gts": 16.0, "link_speed_max_gts": 16.0, "link_width": 4, "link_width_max": 16})
    assert unlinked(diagnose(g), "interconnect.pcie_bottleneck", "interconnect.pcie_link_degraded")


def test_nvlink_contention_on_a_device_that_lost_links_relates_to_the_degradation():
    g = new_graph()
    process(g, 10, "train")
    for i, up in enumerate((12, 8)):
        did = device(g, "gpu", f"0000:{0x1b + i:02x}:00.0", i, nvlink_links=12, nvlink_links_up=up,
                     nvlink_links_down=12 - up, nvlink_util_pct=97.0 if i == 1 else 40.0)
        g.entity(did).attrs["name"] = "H100"
        uses(g, 10, did)
    d = diagnose(g)
    assert linked(d, "interconnect.nvlink_contention", "interconnect.pcie_link_degraded")
