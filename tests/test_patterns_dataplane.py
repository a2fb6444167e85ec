"""Layer 7 patterns on hand-built graphs: at, just below and just above every threshold, and the
producer/consumer reasoning."""

from __future__ import annotations

import pytest

from witty_profiler.diagnosis import diagnose
from witty_profiler.diagnosis.catalog import catalog

from diagnosis_graphs import assert_threshold, device, ipc, new_graph, process, threshold_cases, uses


def waiting_consumer(v, kind="pipe"):
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=v, runqueue_wait_pct=2.0, voluntary_ctxt_switches_per_s=40.0)
    process(g, 20, "reader", ai=False, role=None, cpu_util_pct=99.0)
    ipc(g, kind, 20, 10, bytes_per_s=4096.0)
    return g


def loaders(v):
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=5.0, runqueue_wait_pct=1.0)
    for pid in (11, 12):
        process(g, pid, "pt_data_worker", ppid=10, role="loader", cpu_util_pct=v)
    return g


def bubble(v):
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=100.0)
    uses(g, 10, device(g, "gpu", "0000:3b:00.0", 0, util_pct=100.0 - v, util_pct_p95=100.0))
    return g


def backlog(v):
    g = new_graph()
    process(g, 10, "train")
    process(g, 11, "stage2", ppid=10, role=None)
    ipc(g, "unix_socket", 10, 11, queued_bytes=8e6, queued_bytes_growth_per_s=v)
    return g


BUILDERS = {
    ("dataplane.data_loading_bottleneck", "consumer_cpu_util_pct"): waiting_consumer,
    ("dataplane.preprocessing_bottleneck", "loader_cpu_util_pct"): loaders,
    ("dataplane.pipeline_bubble", "bubble_pct"): bubble,
    ("dataplane.ipc_backlog", "queued_bytes_growth_per_s"): backlog,
}


def test_every_threshold_of_the_layer_has_a_builder():
    assert {(p.id, t.name) for p in catalog().values() if p.layer == 7 for t in p.thresholds} == set(BUILDERS)


@pytest.mark.parametrize("pattern, name, level, limit, direction", threshold_cases(7))
def test_threshold(pattern, name, level, limit, direction):
    assert_threshold(BUILDERS[(pattern, name)], pattern, level, limit, direction)


def test_data_loading_evidence_links_consumer_edge_and_producer():
    f = diagnose(waiting_consumer(3.0)).finding("dataplane.data_loading_bottleneck")
    assert f.subjects == ["process:h1:10"]
    kinds = [(e.kind, e.metric, e.ids[0]) for e in f.evidence]
    assert ("entity", "cpu_util_pct", "process:h1:10") in kinds
    assert ("edge", "bytes_per_s", "pipe|process:h1:20|process:h1:10") in kinds
    assert ("entity", "cpu_util_pct", "process:h1:20") in kinds
    assert "waits for its input" in f.description


@pytest.mark.parametrize("kind", ["unix_socket", "tcp", "shm"])
def test_other_ipc_kinds_link_producers_in_either_direction(kind):
    g = waiting_consumer(3.0, kind)
    assert diagnose(g).finding("dataplane.data_loading_bottleneck") is not None
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=3.0)
    process(g, 20, "peer", ai=False, role=None, cpu_util_pct=99.0)
    ipc(g, kind, 10, 20)
    assert diagnose(g).finding("dataplane.data_loading_bottleneck") is not None


def test_a_pipe_out_of_the_consumer_is_not_its_input():
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=3.0)
    process(g, 20, "sink", ai=False, role=None, cpu_util_pct=99.0)
    ipc(g, "pipe", 10, 20)
    assert diagnose(g).status("dataplane.data_loading_bottleneck") == "clear"


def test_not_a_data_loading_bottleneck_when_the_consumer_is_starved_or_its_device_busy():
    g = waiting_consumer(3.0)
    g.entity("process:h1:10").metrics["runqueue_wait_ms_per_s"] = 800.0  # waits for a CPU, not for input
    assert diagnose(g).finding("dataplane.data_loading_bottleneck") is None
    g = waiting_consumer(3.0)
    uses(g, 10, device(g, "gpu", "0000:3b:00.0", 0, util_pct=95.0))
    assert diagnose(g).finding("dataplane.data_loading_bottleneck") is None


def test_a_long_wait_share_of_little_runnable_time_is_not_starvation():
    g = waiting_consumer(0.1)
    g.entity("process:h1:10").metrics.update(runqueue_wait_pct=80.0, runqueue_wait_ms_per_s=1.0)
    assert diagnose(g).finding("dataplane.data_loading_bottleneck").severity == "critical"


def test_a_producer_waiting_for_a_cpu_is_busy_too():
    g = waiting_consumer(3.0)
    g.entity("process:h1:20").metrics.update(cpu_util_pct=20.0, runqueue_wait_ms_per_s=700.0)
    f = diagnose(g).finding("dataplane.data_loading_bottleneck")
    assert any(e.metric == "runnable_pct" and e.value == 90.0 for e in f.evidence)


def test_an_idle_device_makes_the_waiting_critical():
    g = waiting_consumer(40.0)
    assert diagnose(g).finding("dataplane.data_loading_bottleneck").severity == "warning"
    uses(g, 10, device(g, "gpu", "0000:3b:00.0", 0, util_pct=5.0))
    assert diagnose(g).finding("dataplane.data_loading_bottleneck").severity == "critical"


def test_saturated_loaders_of_a_consumer_that_keeps_up_are_a_notice():
    g = loaders(99.0)
    g.entity("process:h1:10").metrics["cpu_util_pct"] = 95.0
    f = diagnose(g).finding("dataplane.preprocessing_bottleneck")
    assert f.severity == "notice" and "keeps up" in f.description


def test_pipeline_bubble_needs_samples():
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=50.0)
    row = next(c for c in diagnose(g).coverage if c.pattern == "dataplane.pipeline_bubble")
    assert row.status == "not_evaluated" and "samples" in row.reason


def test_a_busy_loop_that_waits_for_a_cpu_has_no_bubble():
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=45.0, cpu_util_pct_p95=100.0, runqueue_wait_ms_per_s=520.0)
    assert diagnose(g).status("dataplane.pipeline_bubble") == "clear"
    g.entity("process:h1:10").metrics["runqueue_wait_ms_per_s"] = 0.0  # idle, not waiting: a real gap
    assert diagnose(g).finding("dataplane.pipeline_bubble").severity == "critical"


def test_small_queues_are_not_a_backlog():
    g = backlog(5e6)
    next(e for e in g.edges("unix_socket")).metrics["queued_bytes"] = 100
    assert diagnose(g).status("dataplane.ipc_backlog") == "clear"


def test_loaders_without_cpu_figures_are_not_evaluated_and_no_loaders_are_clear():
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=5.0)
    for pid in (11, 12):  # e.g. a legacy snapshot: the workers are there, their CPU use is not
        process(g, pid, "pt_data_worker", ppid=10, role="loader")
    row = next(c for c in diagnose(g).coverage if c.pattern == "dataplane.preprocessing_bottleneck")
    assert row.status == "not_evaluated" and "2 loader/producer processes" in row.reason, row
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=5.0)
    row = next(c for c in diagnose(g).coverage if c.pattern == "dataplane.preprocessing_bottleneck")
    assert row.status == "clear" and "no loader or preprocessing workers" in row.reason, row


def test_a_tcp_backlog_names_the_end_that_reads_too_slowly():
    g = new_graph()
    process(g, 10, "train")
    process(g, 20, "feeder", role=None)
    eid = ipc(g, "tcp", 10, 20, queued_bytes=4e6, queued_bytes_growth_per_s=2e6)
    g.edge(eid).attrs["queued_toward"] = "source"  # the client (train) does not read what the server sends
    f = diagnose(g).finding("dataplane.ipc_backlog")
    assert f.severity == "critical" and f.subjects == ["process:h1:10"]
    assert "process 10 reads it more slowly than process 20 writes" in f.description, f.description


def test_ipc_backlog_without_any_queue_is_not_evaluated_and_names_what_it_saw():
    g = new_graph()
    process(g, 10, "train")
    process(g, 11, "stage2", ppid=10, role=None)
    g.edge_of("shm", "process:h1:10", "process:h1:11", {"path": "/dev/shm/x"})
    row = next(c for c in diagnose(g).coverage if c.pattern == "dataplane.ipc_backlog")
    assert row.status == "not_evaluated", row
    assert "1 shm edge" in row.reason and "no queue" in row.reason, row.reason


def test_ipc_backlog_clear_line_names_the_queues_it_could_not_judge():
    g = backlog(0.0)
    ipc(g, "tcp", 10, 11, bytes_sent_total=1e6)  # from a collector that did not read TCP queues
    row = next(c for c in diagnose(g).coverage if c.pattern == "dataplane.ipc_backlog")
    assert row.status == "clear", row
    assert row.reason.startswith("1 IPC queue measured (unix_socket)") and "1 tcp edge without queue depths" in row.reason, \
        row.reason


def test_consumers_without_any_ipc_data_are_not_evaluated_for_data_loading():
    g = new_graph()  # the process collector only: who feeds the consumer through pipes or sockets is unknown
    process(g, 10, "train", cpu_util_pct=5.0, runqueue_wait_pct=1.0)
    row = next(c for c in diagnose(g).coverage if c.pattern == "dataplane.data_loading_bottleneck")
    assert row.status == "not_evaluated" and "no ipc collector ran" in row.reason, row
    g = new_graph(collectors={"process": "ok", "ipc": "ok"})  # looked, and found no producer
    process(g, 10, "train", cpu_util_pct=5.0, runqueue_wait_pct=1.0)
    row = next(c for c in diagnose(g).coverage if c.pattern == "dataplane.data_loading_bottleneck")
    assert row.status == "clear" and "none is fed by IPC" in row.reason, row
