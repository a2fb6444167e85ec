"""Layer 1 patterns on hand-built graphs: at, just below and just above every threshold, and the
cases where they must not fire or cannot be evaluated."""

from __future__ import annotations

import pytest

from witty_profiler.diagnosis import diagnose
from witty_profiler.diagnosis.catalog import catalog

from diagnosis_graphs import assert_threshold, device, host, ipc, new_graph, process, thread, threshold_cases, uses
from trace_graphs import kernel_busy, rank, step_idle, trace_graph


def starvation(v):
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=v, runqueue_wait_pct=90.0, runqueue_wait_ms_per_s=400.0)
    return g


def saturation(v):
    g = new_graph()
    host(g, cpu_util_pct=v)
    return g


def idle_device(v):
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=100.0)
    uses(g, 10, device(g, "gpu", "0000:3b:00.0", 0, util_pct=v))
    return g


def compute_bound(v):
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=v, ipc=0.5)
    return g


def low_ipc(v):
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=80.0, ipc=v)
    return g


def hot_thread(v):
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=v)
    thread(g, 10, 10, cpu_util_pct=v)
    thread(g, 10, 11, cpu_util_pct=2.0)
    thread(g, 10, 12, cpu_util_pct=4.0)
    return g


def throttled(v):
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=100.0)
    uses(g, 10, device(g, "gpu", "0000:3b:00.0", 0, util_pct=90.0, throttle_thermal=1, throttle_power=0,
                       sm_clock_mhz=v * 20, sm_clock_max_mhz=2000.0))
    return g


BUILDERS = {
    ("compute.cpu_starvation", "cpu_util_pct"): starvation,
    ("compute.cpu_saturation", "cpu_util_pct"): saturation,
    ("compute.accelerator_idle", "util_pct"): idle_device,
    ("compute.compute_bound", "cpu_util_pct"): compute_bound,
    ("compute.low_ipc", "ipc"): low_ipc,
    ("compute.hot_thread", "thread_cpu_util_pct"): hot_thread,
    ("compute.accelerator_throttling", "clock_pct"): throttled,
}


def test_every_threshold_of_the_layer_has_a_builder():
    assert {(p.id, t.name) for p in catalog().values() if p.layer == 1 for t in p.thresholds} == set(BUILDERS)


@pytest.mark.parametrize("pattern, name, level, limit, direction", threshold_cases(1))
def test_threshold(pattern, name, level, limit, direction):
    assert_threshold(BUILDERS[(pattern, name)], pattern, level, limit, direction)


# thresholds that trace ranks are judged under as well (a rank's kernel_busy_pct under util_pct)
TRACE_BUILDERS = {("compute.accelerator_idle", "util_pct"): kernel_busy}


@pytest.mark.parametrize("pattern, name, level, limit, direction",
                         [c for c in threshold_cases(1) if tuple(c.values[:2]) in TRACE_BUILDERS])
def test_threshold_on_trace_ranks(pattern, name, level, limit, direction):
    assert_threshold(TRACE_BUILDERS[(pattern, name)], pattern, level, limit, direction)


def test_saturation_of_the_workloads_own_cpus():
    g = new_graph()
    host(g, cpu_util_pct=50.0)
    for n in range(4):
        g.entity_of("cpu", f"cpu:h1:{n}", {"cpu": n}, {"cpu_util_pct": 99.0 if n < 2 else 1.0})
    process(g, 10, "train", cpu_util_pct=100.0, attrs={"cpus_allowed": "0-1"})
    f = diagnose(g).finding("compute.cpu_saturation")
    assert f.severity == "critical" and "the workload's 2 CPUs" in f.description
    assert {"cpu:h1:0", "cpu:h1:1"} <= set(f.subjects) and "host:h1" not in f.subjects


def test_hot_thread_needs_idle_siblings():
    g = hot_thread(99.0)
    g.entity("thread:h1:10:11").metrics["cpu_util_pct"] = 90.0  # siblings busy: parallel, not serial
    assert diagnose(g).status("compute.hot_thread") == "clear"


def test_hot_thread_names_the_code_it_runs_where_stacks_were_sampled():
    g = hot_thread(99.0)
    hot = g.entity("thread:h1:10:10")
    hot.attrs["hot_function"] = "PIL.JpegImagePlugin.load \u2190 dataset.__getitem__"
    hot.metrics["hot_function_pct"] = 61.0
    f = diagnose(g).finding("compute.hot_thread")
    assert "61 % of its samples in PIL.JpegImagePlugin.load \u2190 dataset.__getitem__" in f.description
    assert any(e.metric == "hot_function_pct" and e.value == 61.0 for e in f.evidence)
    assert "of its samples" not in diagnose(hot_thread(99.0)).finding("compute.hot_thread").description


def test_throttle_flag_without_clocks_is_a_warning():
    g = new_graph()
    process(g, 10, "train")
    uses(g, 10, device(g, "gpu", "0000:3b:00.0", 0, throttle_power=1))
    f = diagnose(g).finding("compute.accelerator_throttling")
    assert f.severity == "warning" and "power" in f.description


def test_pmu_patterns_not_evaluated_without_counters():
    d = diagnose(starvation(50.0))
    for pid in ("compute.compute_bound", "compute.low_ipc"):
        row = next(c for c in d.coverage if c.pattern == pid)
        assert row.status == "not_evaluated" and "PMU" in row.reason


def test_accelerator_patterns_say_why_no_device():
    g = new_graph(collectors={"process": "ok", "gpu": "unavailable"})
    g.meta.collectors["gpu"].reason = "NVML library not found"
    process(g, 10, "train", cpu_util_pct=50.0)
    row = next(c for c in diagnose(g).coverage if c.pattern == "compute.accelerator_idle")
    assert row.status == "not_evaluated" and "NVML library not found" in row.reason


def test_idle_accelerator_points_to_the_data_plane():
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=5.0, runqueue_wait_ms_per_s=1.0, voluntary_ctxt_switches_per_s=200.0)
    uses(g, 10, device(g, "gpu", "0000:3b:00.0", 0, util_pct=8.0))
    for pid in (11, 12):
        process(g, pid, "pt_data_worker", ppid=10, role="loader", cpu_util_pct=99.0)
    d = diagnose(g)
    data = d.finding("dataplane.data_loading_bottleneck")
    assert data is not None and data.severity == "critical"
    idle = d.finding("compute.accelerator_idle")
    assert "dataplane.data_loading_bottleneck" in idle.related and "wait for input" in idle.description
    # it sleeps by itself, waiting for input: idle, not starved of CPU
    assert d.status("compute.cpu_starvation") == "clear"
    # without the busy loaders the same idle device is only a compute finding
    g.entity("process:h1:11").metrics["cpu_util_pct"] = 1.0
    g.entity("process:h1:12").metrics["cpu_util_pct"] = 1.0
    d = diagnose(g)
    assert d.finding("dataplane.data_loading_bottleneck") is None
    assert d.finding("compute.accelerator_idle").related == []


def test_starved_consumer_that_also_waits_for_input_points_to_the_data_plane():
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=5.0, runqueue_wait_ms_per_s=300.0)  # 30 % of the window in the run queue
    process(g, 20, "reader", ai=False, role=None, cpu_util_pct=95.0)
    ipc(g, "pipe", 20, 10)
    d = diagnose(g)
    starving = d.finding("compute.cpu_starvation")
    assert starving.severity == "notice" and "dataplane.data_loading_bottleneck" in starving.related
    g.entity("process:h1:20").metrics["cpu_util_pct"] = 1.0
    assert diagnose(g).finding("compute.cpu_starvation").severity == "critical"


def test_idle_process_without_run_queue_figures_is_not_evaluated():
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=1.0)
    row = next(c for c in diagnose(g).coverage if c.pattern == "compute.cpu_starvation")
    assert row.status == "not_evaluated" and "schedstat" in row.reason


def test_loader_and_launcher_are_not_expected_to_be_busy():
    g = new_graph()
    process(g, 10, "torchrun", role="launcher", cpu_util_pct=0.1)
    process(g, 11, "worker", ppid=10, role="loader", cpu_util_pct=0.1)
    assert diagnose(g).status("compute.cpu_starvation") == "clear"


def test_named_sleeping_pid_is_idle_not_starved():
    g = new_graph()
    process(g, 10, "app", ai=False, role=None, cpu_util_pct=0.0, runqueue_wait_ms_per_s=0.0)
    process(g, 20, "writer", ai=False, role=None, cpu_util_pct=90.0)
    ipc(g, "pipe", 20, 10)
    d = diagnose(g, pids=[10])
    assert d.status("compute.cpu_starvation") == "clear"
    assert d.finding("dataplane.data_loading_bottleneck").severity == "critical"


def test_cpu_time_stolen_by_the_hypervisor_counts_as_taken():
    g = new_graph()
    host(g, cpu_util_pct=85.0, cpu_steal_pct=12.0)  # 97 % not there for the workload: > 95
    process(g, 10, "train", cpu_util_pct=90.0)
    f = diagnose(g).finding("compute.cpu_saturation")
    assert f.severity == "critical" and "85 % busy and 12 % stolen by the hypervisor" in f.description
    combined = next(e for e in f.evidence if e.metric == "cpu_busy_or_stolen_pct")
    assert (combined.value, combined.threshold) == (97.0, "> 95")
    assert next(e for e in f.evidence if e.metric == "cpu_steal_pct").value == 12.0
    g.entity("host:h1").metrics["cpu_steal_pct"] = 2.0  # 87 %: clear, and the clear line says what was stolen
    row = next(c for c in diagnose(g).coverage if c.pattern == "compute.cpu_saturation")
    assert row.status == "clear" and "85 % + 2 % stolen" in row.reason


def bursty(per_slice_us):
    """A process that runs in short bursts (3,000 slices a second) and spends 30 % of the window
    waiting for a CPU, per_slice_us at a time."""
    g = new_graph()
    process(g, 10, "writer", cpu_util_pct=8.0, runqueue_wait_ms_per_s=300.0, runqueue_wait_pct=79.0,
            runqueue_wait_per_slice_us=per_slice_us, timeslices_per_s=3000.0)
    return g


def test_many_short_waits_are_not_starvation():
    for value in (999.0, 1000.0):  # a wait under a millisecond per slice: waking up, not queued behind others
        row = next(c for c in diagnose(bursty(value)).coverage if c.pattern == "compute.cpu_starvation")
        assert row.status == "clear", row
        assert "per slice" in row.reason and "short bursts" in row.reason, row.reason
    f = diagnose(bursty(1001.0)).finding("compute.cpu_starvation")
    assert f.severity == "critical"
    assert any(e.metric == "runqueue_wait_per_slice_us" and e.threshold == "> 1000" for e in f.evidence), f.evidence
    # the bound is a parameter of the pattern
    lowered = {"compute.cpu_starvation": {"min_wait_per_slice_us": 100}}
    assert diagnose(bursty(250.0), thresholds=lowered).finding("compute.cpu_starvation") is not None


# -- training traces ----------------------------------------------------------------------------
def test_idle_accelerator_of_a_trace_rank_names_the_rank_and_its_busy_share():
    f = diagnose(kernel_busy(20.0)).finding("compute.accelerator_idle")
    assert f.severity == "critical" and f.subjects == ["rank:trace:test:0"]
    assert f.description.startswith("From training traces: 1 rank has a mostly idle accelerator: rank 0 "
                                     "(rank:trace:test:0) runs kernels 20 % of its step (threshold < 30 %)"), \
        f.description
    assert "(host samples: not evaluated, no GPU or NPU" in f.description
    ev = {e.metric: e for e in f.evidence}
    assert ev["kernel_busy_pct"].value == 20.0 and ev["kernel_busy_pct"].threshold == "< 30"
    assert ev["free_ms"].value == 800.0 and ev["step_time_ms"].value == 1000.0


def test_msprof_ranks_have_no_kernel_busy_share_and_the_reason_says_so():
    d = diagnose(step_idle(60.0))  # an msprof rank: free and step times, no kernel_busy_pct
    assert d.status("compute.accelerator_idle") == "not_evaluated"
    reason = next(c.reason for c in d.coverage if c.pattern == "compute.accelerator_idle")
    assert "1 trace rank (msprof) without kernel_busy_pct; msprof-analyze's step trace gives compute" in reason
    assert "host samples: not evaluated, no GPU or NPU in this graph" in reason


def test_idle_trace_rank_relates_to_its_idle_steps():
    g = kernel_busy(20.0)  # free 800 ms of 1000: dataplane.pipeline_bubble fires on the same rank
    d = diagnose(g)
    f = d.finding("compute.accelerator_idle")
    assert "dataplane.pipeline_bubble" in f.related and "See dataplane.pipeline_bubble" in f.description
    assert "compute.accelerator_idle" in d.finding("dataplane.pipeline_bubble").related


def test_host_device_and_trace_rank_both_judged():
    g = idle_device(40.0)  # host: warning
    rank(g, 0, step_time_ms=1000.0, kernel_busy_pct=80.0)  # traces: clear
    f = diagnose(g).finding("compute.accelerator_idle")
    assert f.severity == "warning" and f.description.startswith("From host samples: 1 accelerator in use")
    assert "(training traces: 1 trace rank measured; lowest kernel_busy_pct 80 %" in f.description, f.description
    rank(g, 1, step_time_ms=1000.0, kernel_busy_pct=10.0)  # traces: critical, reported first
    f = diagnose(g).finding("compute.accelerator_idle")
    assert f.severity == "critical" and f.description.startswith("From training traces: ")
    assert " From host samples: " in f.description
    assert {e.metric for e in f.evidence} >= {"kernel_busy_pct", "util_pct"}
    g = trace_graph()
    rank(g, 0, step_time_ms=1000.0, kernel_busy_pct=80.0)
    assert diagnose(g).status("compute.accelerator_idle") == "clear"
