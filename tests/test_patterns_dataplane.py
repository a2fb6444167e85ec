"""Layer 7 patterns on hand-built graphs: at, just below and just above every threshold, and the
producer/consumer reasoning."""

from __future__ import annotations

import pytest

from witty_profiler.diagnosis import diagnose
from witty_profiler.diagnosis.catalog import catalog

from diagnosis_graphs import assert_threshold, device, ipc, new_graph, process, threshold_cases, uses
from trace_graphs import loading_share, pipeline_stage, rank, step_idle, trace_graph


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
    ("dataplane.data_loading_bottleneck", "loading_step_pct"): loading_share,
    ("dataplane.preprocessing_bottleneck", "loader_cpu_util_pct"): loaders,
    ("dataplane.pipeline_bubble", "bubble_pct"): bubble,
    ("dataplane.pipeline_bubble", "step_idle_pct"): step_idle,
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


# -- training traces ----------------------------------------------------------------------------
def test_idle_share_of_a_trace_rank_names_its_free_time_and_the_source():
    f = diagnose(step_idle(40.0)).finding("dataplane.pipeline_bubble")
    assert f.severity == "warning" and f.subjects == ["rank:trace:test:0"]
    assert f.description.startswith("From training traces: 1 rank leaves its accelerator idle"), f.description
    assert "free 400 ms of its 1000 ms step" in f.description and "40 %" in f.description
    assert "host samples: not evaluated" in f.description
    ev = {e.metric: e for e in f.evidence}
    assert ev["step_idle_pct"].value == 40.0 and ev["step_idle_pct"].threshold == "> 30"
    assert ev["free_ms"].value == 400.0


def test_a_pipeline_bubble_counts_as_idle_and_msprofs_stage_leaves_it_out():
    # Stage 800 ms without the receives, Bubble 200 ms: a 1000 ms step, (150 + 200) / 1000 idle
    f = diagnose(pipeline_stage(free=150.0, bubble=200.0)).finding("dataplane.pipeline_bubble")
    assert f.severity == "warning"
    ev = {e.metric: e for e in f.evidence}
    assert ev["step_idle_pct"].value == 35.0
    assert ev["bubble_ms"].value == 200.0 and ev["free_ms"].value == 150.0
    assert "free 150 ms + bubble 200 ms of its 1000 ms step" in f.description, f.description


def test_trace_ranks_without_idle_time_are_clear_and_without_free_time_not_evaluated():
    d = diagnose(step_idle(5.0))
    assert d.status("dataplane.pipeline_bubble") == "clear"
    reason = next(c.reason for c in d.coverage if c.pattern == "dataplane.pipeline_bubble")
    assert reason.startswith("training traces: 1 trace rank measured; the most idle, rank 0, free 50 ms"), reason
    g = trace_graph()
    rank(g, 0, compute_ms=100.0)
    d = diagnose(g)
    assert d.status("dataplane.pipeline_bubble") == "not_evaluated"


def test_host_and_trace_bubbles_are_both_reported_the_worse_first():
    g = bubble(40.0)  # host: warning
    rank(g, 0, step_time_ms=1000.0, free_ms=600.0)  # traces: critical
    f = diagnose(g).finding("dataplane.pipeline_bubble")
    assert f.severity == "critical"
    assert f.description.startswith("From training traces: ") and " From host samples: " in f.description
    assert {e.metric for e in f.evidence} >= {"step_idle_pct", "free_ms", "bubble_pct"}
    assert "rank:trace:test:0" in f.subjects and any(s.startswith("gpu:") for s in f.subjects), f.subjects
    g = bubble(60.0)  # host: critical, traces: clear
    rank(g, 0, step_time_ms=1000.0, free_ms=10.0)
    f = diagnose(g).finding("dataplane.pipeline_bubble")
    assert f.severity == "critical" and f.description.startswith("From host samples: ")
    assert "(training traces: 1 trace rank measured" in f.description
    assert all(e.metric != "step_idle_pct" for e in f.evidence)


def test_trace_data_loading_needs_the_accelerator_free_meanwhile():
    f = diagnose(loading_share(20.0)).finding("dataplane.data_loading_bottleneck")
    assert f.severity == "warning" and f.subjects == ["rank:trace:test:0"]
    assert "spends 200 ms of its 1000 ms step in the data loader (20 %" in f.description, f.description
    assert f.description.startswith("From training traces: ")
    ev = {e.metric: e for e in f.evidence}
    assert ev["data_loading_step_pct"].value == 20.0 and ev["free_ms"].value == 200.0
    # loading under the kernels (prefetching): the accelerator is busy meanwhile
    d = diagnose(loading_share(20.0, free_of_loading=0.1))
    assert d.status("dataplane.data_loading_bottleneck") == "clear"


def test_msprof_ranks_have_no_data_loading_time_and_the_reason_says_so():
    g = trace_graph()
    rank(g, 0, step_time_ms=1000.0, free_ms=500.0)
    d = diagnose(g)
    assert d.status("dataplane.data_loading_bottleneck") == "not_evaluated"
    reason = next(c.reason for c in d.coverage if c.pattern == "dataplane.data_loading_bottleneck")
    assert "1 trace rank (msprof) without data_loading_ms" in reason
    assert "msprof-analyze's step trace has no data-loading time" in reason
    assert "host samples: not evaluated" in reason
