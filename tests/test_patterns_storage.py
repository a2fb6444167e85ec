"""Layer 5 patterns on hand-built graphs: at, just below and just above every threshold."""

from __future__ import annotations

import pytest

from witty_profiler.diagnosis import diagnose
from witty_profiler.diagnosis.catalog import catalog

from diagnosis_graphs import assert_threshold, host, new_graph, process, threshold_cases


def host_metric(name, **others):
    def build(v):
        g = new_graph()
        host(g, **{name: v, **others})
        return g
    return build


def disk(v):
    g = new_graph()
    g.entity_of("block_device", "block_device:h1:nvme0n1", {"name": "nvme0n1"},
                {"disk_util_pct": v, "await_ms": 12.0, "write_bytes_per_s": 1e9})
    return g


def blocked(v):
    g = new_graph()
    host(g, cpu_iowait_pct=1.0, psi_io_some_pct=2.0)
    process(g, 10, "train", io_blocked_pct=v, write_bytes_per_s=478e6)
    return g


def burst(v):
    g = new_graph(duration_s=60.0)
    process(g, 10, "train", write_burst_s=v, write_bytes_per_s=2e9)
    return g


BUILDERS = {
    ("storage.io_wait", "cpu_iowait_pct"): host_metric("cpu_iowait_pct", psi_io_some_pct=0.0),
    ("storage.io_wait", "psi_io_some_pct"): host_metric("psi_io_some_pct", cpu_iowait_pct=0.0),
    ("storage.io_wait", "io_blocked_pct"): blocked,
    ("storage.disk_saturation", "disk_util_pct"): disk,
    ("storage.checkpoint_stall", "write_burst_s"): burst,
}


def test_every_threshold_of_the_layer_has_a_builder():
    assert {(p.id, t.name) for p in catalog().values() if p.layer == 5 for t in p.thresholds} == set(BUILDERS)


@pytest.mark.parametrize("pattern, name, level, limit, direction", threshold_cases(5))
def test_threshold(pattern, name, level, limit, direction):
    assert_threshold(BUILDERS[(pattern, name)], pattern, level, limit, direction)


def test_disk_evidence_has_await():
    f = diagnose(disk(95.0)).finding("storage.disk_saturation")
    assert any(e.metric == "await_ms" and e.value == 12.0 for e in f.evidence)


def test_short_window_cannot_see_a_checkpoint_stall():
    g = new_graph(duration_s=3.0)
    process(g, 10, "train", write_burst_s=3.0)
    row = next(c for c in diagnose(g).coverage if c.pattern == "storage.checkpoint_stall")
    assert row.status == "not_evaluated" and "too short" in row.reason


def test_a_process_blocked_on_its_disk_is_named_while_the_host_iowait_is_low():
    f = diagnose(blocked(45.0)).finding("storage.io_wait")
    assert f.severity == "critical" and "process:h1:10" in f.subjects
    assert "blocked on block I/O much of the window" in f.description
    assert any(e.metric == "write_bytes_per_s" and e.value == 478e6 for e in f.evidence)
    row = next(c for c in diagnose(blocked(1.0)).coverage if c.pattern == "storage.io_wait")
    assert row.status == "clear" and "io_blocked_pct" in row.reason
