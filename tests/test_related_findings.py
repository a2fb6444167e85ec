"""Findings with one cause name each other in `related`, both ways, where the evidence shows the
same cause: I/O wait that is paging and the memory pressure behind it, I/O wait on a saturated
disk."""

from __future__ import annotations

import pytest

from witty_profiler.diagnosis import diagnose

from diagnosis_graphs import cgroup, host, new_graph, process


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
