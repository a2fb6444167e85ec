"""Layer 2 patterns on hand-built graphs: at, just below and just above every threshold."""

from __future__ import annotations

import pytest

from witty_profiler.diagnosis import diagnose
from witty_profiler.diagnosis.catalog import catalog

from diagnosis_graphs import assert_threshold, cgroup, device, host, new_graph, numa, process, threshold_cases, uses


def llc(v):
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=90.0, llc_miss_pct=100.0 - v)
    return g


def dram(v):
    g = new_graph()
    host(g, cpu_util_pct=10.0)
    numa(g, 0, "0-3", dram_bw_util_pct=v)
    return g


def with_device(**metrics):
    def build(v):
        g = new_graph()
        process(g, 10, "train", cpu_util_pct=100.0)
        uses(g, 10, device(g, "gpu", "0000:3b:00.0", 0, **{k: (v if val is None else val) for k, val in metrics.items()}))
        return g
    return build


def host_metric(name, **others):
    def build(v):
        g = new_graph()
        host(g, **{name: v, **others})
        return g
    return build


BUILDERS = {
    ("memory.cache_miss_storm", "llc_hit_pct"): llc,
    ("memory.bandwidth_wall", "dram_bw_util_pct"): dram,
    ("memory.hbm_bandwidth_limit", "mem_bw_util_pct"): with_device(mem_bw_util_pct=None),
    ("memory.pressure", "psi_memory_some_pct"): host_metric("psi_memory_some_pct", swap_in_pages_per_s=0.0),
    ("memory.pressure", "swap_pages_per_s"): host_metric("swap_in_pages_per_s", swap_out_pages_per_s=0.0),
    ("memory.pressure", "major_faults_per_s"): host_metric("major_faults_per_s"),
    ("memory.accelerator_memory_full", "memory_used_pct"): with_device(memory_used_pct=None),
}


def test_every_threshold_of_the_layer_has_a_builder():
    assert {(p.id, t.name) for p in catalog().values() if p.layer == 2 for t in p.thresholds} == set(BUILDERS)


@pytest.mark.parametrize("pattern, name, level, limit, direction", threshold_cases(2))
def test_threshold(pattern, name, level, limit, direction):
    assert_threshold(BUILDERS[(pattern, name)], pattern, level, limit, direction)


def test_swap_in_and_out_add_up():
    g = host_metric("swap_in_pages_per_s", swap_out_pages_per_s=60.0)(60.0)
    f = diagnose(g).finding("memory.pressure")
    assert f.severity == "warning" and any(e.metric == "swap_pages_per_s" and e.value == 120.0 for e in f.evidence)


def test_device_memory_from_bytes():
    g = with_device(memory_used_bytes=77e9, memory_total_bytes=80e9)(0)
    assert diagnose(g).finding("memory.accelerator_memory_full").severity == "warning"


def test_quiet_host_memory_is_clear():
    g = new_graph()
    host(g, psi_memory_some_pct=0.0, swap_in_pages_per_s=0.0, swap_out_pages_per_s=0.0, major_faults_per_s=3.0)
    assert diagnose(g).status("memory.pressure") == "clear"


def test_memory_pressure_of_the_workloads_cgroup():
    g = new_graph()
    host(g, psi_memory_some_pct=0.5)
    process(g, 10, "train", cpu_util_pct=50.0)
    cgroup(g, "/kubepods/pod1", version="v2", members=(10,), psi_memory_some_pct=40.0, memory_usage_bytes=8e9,
           memory_limit_bytes=8.1e9)
    f = diagnose(g).finding("memory.pressure")
    assert f.severity == "critical" and f.subjects == ["cgroup:h1:v2:/kubepods/pod1"]
    assert "in cgroup v2:/kubepods/pod1" in f.description
    assert any(e.metric == "memory_limit_bytes" for e in f.evidence)
