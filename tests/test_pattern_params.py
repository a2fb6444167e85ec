"""Boundary tests of every pattern `Param`: the pattern's main threshold is firmly crossed and only
the parameter's measure varies, just below the parameter, at it and just above it. The expected
verdict on each side follows the parameter's help text (strict "more than" / "below", inclusive
"at least" / "reaches" / "or less"). Overriding a parameter (mapping or TOML file) moves the
boundary, and a new `Param` without a spec here fails the guard test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from witty_profiler.diagnosis import diagnose
from witty_profiler.diagnosis.catalog import catalog
from witty_profiler.topology import Graph

from cluster_graphs import nic_speeds, ranks_on_hosts
from trace_graphs import bandwidth_z, latency_message, link_peers, loading_free, votes
from diagnosis_graphs import (
    allocates_on,
    device,
    host,
    ipc,
    new_graph,
    numa,
    process,
    runs_on,
    thread,
    two_numa_host,
    uses,
)

SIDES = ("below", "at", "above")


@dataclass(frozen=True)
class Spec:
    """`build(v)` makes a graph where `v` is the measure the parameter is compared with; below, at
    and above are the expected severity there (None: the pattern does not fire)."""

    pattern: str
    param: str
    build: Callable[[float], Graph]
    below: str | None
    at: str | None
    above: str | None
    variant: str = ""

    @property
    def id(self) -> str:
        return f"{self.pattern}.{self.param}" + (f"+{self.variant}" if self.variant else "")

    def expected(self, side: str) -> str | None:
        return getattr(self, side)


def _eps(limit: float) -> float:
    return max(abs(limit) * 1e-3, 1e-3)


def _value(limit: float, side: str) -> float:
    return {"below": limit - _eps(limit), "at": limit, "above": limit + _eps(limit)}[side]


def _default(pattern: str, param: str) -> float:
    return next(p.value for p in catalog()[pattern].params if p.name == param)


def _check(spec: Spec, value: float, expected: str | None, **kwargs) -> None:
    d = diagnose(spec.build(value), **kwargs)
    f = d.finding(spec.pattern)
    row = next(c for c in d.coverage if c.pattern == spec.pattern)
    assert "internal error" not in row.reason, row.reason
    if expected is None:
        assert f is None, f"{spec.id} fired at {value}: {f.severity} {f.description}"
        assert row.status in ("clear", "not_evaluated"), row
    else:
        assert f is not None, f"{spec.id} did not fire at {value}: {row.status} {row.reason}"
        assert f.severity == expected, (spec.id, value, f.severity, f.description)


# -- layer 1, compute ------------------------------------------------------------------------------
def starvation_wait(v):
    """Far under the CPU threshold (5 % < 20 %); the run-queue wait share is v % of the window."""
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=5.0, runqueue_wait_ms_per_s=v * 10)
    return g


def starvation_slice(v):
    """Far under the CPU threshold and waiting 30 % of the window (>= 10 %), v us at a time."""
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=5.0, runqueue_wait_ms_per_s=300.0, runqueue_wait_per_slice_us=v,
            timeslices_per_s=300e3 / max(v, 1.0))
    return g


def compute_bound_llc(v):
    """Busy (99 % > 90 %) with a good IPC: only the LLC miss share can make it stalled."""
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=99.0, ipc=2.0, llc_miss_pct=v)
    return g


def compute_bound_ipc(v):
    """Busy with no LLC misses: only the IPC can make it stalled."""
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=99.0, ipc=v, llc_miss_pct=0.0)
    return g


def low_ipc_activity(v):
    """IPC far under the critical level (0.3 < 0.5); the CPU use is v %."""
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=v, ipc=0.3)
    return g


def hot_thread_siblings(v):
    """One thread at 99 % (> 90 %); its two siblings average v %."""
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=99.0 + 2 * v)
    thread(g, 10, 10, cpu_util_pct=99.0)
    thread(g, 10, 11, cpu_util_pct=v)
    thread(g, 10, 12, cpu_util_pct=v)
    return g


# -- layer 3, interconnect -------------------------------------------------------------------------
def cross_numa_pages(v):
    """Runs on node 1 with all its v pages on node 0: 100 % remote (> 50 %)."""
    g = new_graph()
    two_numa_host(g)
    process(g, 10, "train")
    thread(g, 10, 10)
    runs_on(g, 10, 10, 1, 1e9)
    allocates_on(g, 10, 0, v)
    return g


def cross_numa_pages_measured(v):
    """The same, with the collector's measured remote share beside the pages (as a live capture has)."""
    g = cross_numa_pages(v)
    g.entity("process:h1:10").metrics.update(numa_remote_pages_pct=100.0, numa_pages_total=v)
    return g


def mismatch_distance(v):
    """Runs on node 1 only while its GPU is on node 0 (100 % remote > 80 %); the nodes are v apart."""
    g = new_graph()
    numa(g, 0, "0-3", {0: 10, 1: v})
    numa(g, 1, "4-7", {0: v, 1: 10})
    process(g, 10, "train")
    uses(g, 10, device(g, "gpu", "0000:3b:00.0", 0, numa_node=0))
    thread(g, 10, 10)
    runs_on(g, 10, 10, 1, 1e9)
    allocates_on(g, 10, 0, 1000)
    return g


def link_util(v):
    """Full width at a quarter of the speed (25 % < 50 % of the capacity); the device is v % busy."""
    g = new_graph()
    g.entity_of("pci_device", "pci_device:h1:0000:3b:00.0", {"class": "0x030200"},
                {"link_speed_gts": 4.0, "link_speed_max_gts": 16.0, "link_width": 16, "link_width_max": 16,
                 "util_pct": v})
    return g


# -- layer 4, network ------------------------------------------------------------------------------
def congestion_bytes(v):
    """An inter-node connection with a 5 ms RTT (> 100 us) that carried v bytes."""
    g = new_graph()
    process(g, 10, "train")
    cid = g.entity_of("tcp_connection", "tcp_connection:h1:10.0.0.1:40000:10.0.0.2:29500",
                      {"local": "10.0.0.1:40000", "remote": "10.0.0.2:29500", "pid": 10},
                      {"rtt_us": 5000.0, "bytes_sent_total": v * 0.75, "bytes_received_total": v * 0.25}).id
    g.edge_of("owns_connection", "process:h1:10", cid)
    return g


def retrans_segments(v):
    """5 % of the segments retransmitted (> 1 %); the host sends v segments/s."""
    g = new_graph()
    host(g, tcp_retrans_pct=5.0, tcp_out_segs_per_s=v, tcp_retrans_segs_per_s=v * 0.05)
    return g


# -- layer 6, control ------------------------------------------------------------------------------
def scheduling_runnable(v):
    """A task that waits 90 % of its runnable time (> 50 %) and is runnable v % of the window
    (running 0.6 v, waiting 0.4 v)."""
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=v * 0.6, runqueue_wait_ms_per_s=v * 4, runqueue_wait_pct=90.0)
    return g


def scheduling_slice(v):
    """A task that waits 90 % of its runnable time (> 50 %), v us at a time (far under 10 ms)."""
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=10.0, runqueue_wait_ms_per_s=90.0, runqueue_wait_pct=90.0,
            runqueue_wait_per_slice_us=v)
    return g


def futex_wakeups(v):
    """A workload thread waiting on futexes 80 % of the window (> 60 %), woken v times a second."""
    g = new_graph(collectors={"process": "ok", "ebpf": "ok"})
    process(g, 10, "train", cpu_util_pct=30.0)
    thread(g, 10, 11, futex_wait_pct=80.0, futex_lock_wait_pct=80.0, futex_wakeups_per_s=v)
    return g


def imbalance_work(v):
    """Two workers of one job, the busiest at v % and the other 60.05 % less busy (> 60 %): under
    min_work_pct the gap counts against min_work_pct, in proportion, and drops under 60 % just
    below it (no sudden flip from critical to nothing)."""
    g = new_graph()
    worker = {"cmdline": "python worker.py"}
    process(g, 10, "torchrun", role="launcher", cpu_util_pct=0.5)
    process(g, 11, "worker", ppid=10, cpu_util_pct=v, attrs=worker)
    process(g, 12, "worker", ppid=10, cpu_util_pct=v * (1 - 0.6005), attrs=worker)
    return g


# -- layer 7, data plane ---------------------------------------------------------------------------
def loading_producer(v):
    """A consumer at 5 % CPU (< 20 %) fed by a pipe from a producer runnable v % of the window
    (running 0.8 v, waiting 0.2 v)."""
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=5.0, runqueue_wait_ms_per_s=0.0)
    process(g, 20, "reader", ai=False, role=None, cpu_util_pct=v * 0.8, runqueue_wait_ms_per_s=v * 2)
    ipc(g, "pipe", 20, 10, bytes_per_s=4096.0)
    return g


def loading_consumer_wait(v):
    """The consumer waits for a CPU v % of the window; its producer is 99 % busy."""
    g = loading_producer(99.0)
    g.entity("process:h1:10").metrics["runqueue_wait_ms_per_s"] = v * 10
    return g


def loading_device(v):
    """A consumer at 40 % CPU (< 50 %) with a busy producer; its accelerator is v % busy."""
    g = loading_producer(99.0)
    g.entity("process:h1:10").metrics["cpu_util_pct"] = 40.0
    uses(g, 10, device(g, "gpu", "0000:3b:00.0", 0, util_pct=v))
    return g


def bubble_peak(v):
    """A device whose mean is a fifth of its p95 (80 % bubble > 50 %); the p95 is v %."""
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=100.0)
    uses(g, 10, device(g, "gpu", "0000:3b:00.0", 0, util_pct=v / 5, util_pct_p95=v))
    return g


def backlog_queued(v):
    """A unix socket queue growing 5 MB/s (> 1 MiB/s) that holds v bytes at the end."""
    g = new_graph()
    process(g, 10, "train")
    process(g, 11, "stage2", ppid=10, role=None)
    ipc(g, "unix_socket", 10, 11, queued_bytes=v, queued_bytes_growth_per_s=5e6)
    return g


SPECS = [
    # "must also wait for a CPU at least this share": inclusive
    Spec("compute.cpu_starvation", "min_cpu_wait_pct", starvation_wait, None, "critical", "critical"),
    # "and wait longer than this each time": strict
    Spec("compute.cpu_starvation", "min_wait_per_slice_us", starvation_slice, None, None, "critical"),
    # "above which ... counts as stalled": strict
    Spec("compute.compute_bound", "llc_miss_pct", compute_bound_llc, None, None, "warning"),
    # "below which ... counts as stalled": strict
    Spec("compute.compute_bound", "ipc", compute_bound_ipc, "warning", None, None),
    # "ignore subjects less busy than this": at it, judged
    Spec("compute.low_ipc", "min_cpu_util_pct", low_ipc_activity, None, "critical", "critical"),
    # "the other threads' mean CPU use must be below this": strict
    Spec("compute.hot_thread", "siblings_cpu_util_pct", hot_thread_siblings, "warning", None, None),
    # "ignore processes with fewer pages than this": at it, judged
    Spec("interconnect.cross_numa_access", "min_pages", cross_numa_pages, None, "critical", "critical"),
    Spec("interconnect.cross_numa_access", "min_pages", cross_numa_pages_measured, None, "critical", "critical",
         variant="measured"),
    # "at this NUMA distance or less ... lower a critical finding to a warning": inclusive
    Spec("interconnect.device_numa_mismatch", "near_distance", mismatch_distance, "warning", "warning", "critical"),
    # "a device less busy than this may lower its link speed": at it, a speed loss counts
    Spec("interconnect.pcie_link_degraded", "min_util_pct", link_util, None, "critical", "critical"),
    # "ignore connections that carried less than this": at it, judged
    Spec("network.congestion", "min_bytes", congestion_bytes, None, "critical", "critical"),
    # "ignore hosts sending fewer segments than this": at it, judged
    Spec("network.retransmission", "min_segments_per_s", retrans_segments, None, "critical", "critical"),
    # "ignore tasks runnable less than this share": at it, judged
    Spec("control.scheduling_latency", "min_runnable_pct", scheduling_runnable, None, "critical", "critical"),
    # "a task's wait share counts only where its waits last longer than this": strict
    Spec("control.scheduling_latency", "min_wait_per_slice_us", scheduling_slice, None, None, "critical"),
    # "a thread must be woken ... at least this often": inclusive
    Spec("control.lock_contention", "min_futex_wakeups_per_s", futex_wakeups, None, "critical", "critical"),
    # "the least work the gap is measured against": at it and above, the busiest member's work
    Spec("control.load_imbalance", "min_work_pct", imbalance_work, "warning", "critical", "critical"),
    # "a producer running or waiting ... more than this share counts as busy": strict
    Spec("dataplane.data_loading_bottleneck", "producer_busy_pct", loading_producer, None, None, "critical"),
    # "a consumer waiting for a CPU more than this share is starved for CPU, not for input": strict
    Spec("dataplane.data_loading_bottleneck", "max_cpu_wait_pct", loading_consumer_wait, "critical", "critical",
         None),
    # "a consumer whose accelerator is busier than this is not input-bound": strict
    Spec("dataplane.data_loading_bottleneck", "device_busy_pct", loading_device, "warning", "warning", None),
    # "an accelerator of the consumer below this makes the finding critical": strict
    Spec("dataplane.data_loading_bottleneck", "device_idle_pct", loading_device, "critical", "warning", "warning"),
    # "only consumers whose p95 utilisation reaches this": inclusive
    Spec("dataplane.pipeline_bubble", "min_busy_pct", bubble_peak, None, "critical", "critical"),
    # "ignore queues holding less than this": at it, judged
    Spec("dataplane.ipc_backlog", "min_queued_bytes", backlog_queued, None, "critical", "critical"),
]

# -- cross-host ------------------------------------------------------------------------------------
def straggler_z(v):
    """Four peers around 100 % CPU (median 100, MAD 10) and one rank so far below that its robust z is v;
    at z 3.5 it is 52 points below them (a critical deviation)."""
    return ranks_on_hosts([100.0, 100.0, 80.0, 120.0, 100.0 - v / 0.6745 * 10])


def straggler_peers(v):
    """int(v) ranks on as many hosts, the last one 60 % below the CPU of the others (critical)."""
    n = int(v)
    return ranks_on_hosts([100.0] * (n - 1) + [40.0] if n else [])


def odd_share(v):
    """100 hosts, int(v * 100) of them with a 100 Gb/s NIC and the rest at 25 Gb/s."""
    agree = int(round(v * 100, 6))
    return nic_speeds([100000.0] * agree + [25000.0] * (100 - agree))


def odd_hosts(v):
    """int(v) hosts, one with a slower NIC than the others."""
    n = int(v)
    return nic_speeds([100000.0] * (n - 1) + [25000.0] if n else [])


CLUSTER_SPECS = [
    # "the least robust z-score": a rank must be farther out (strictly)
    Spec("control.straggler_host", "robust_z", straggler_z, None, None, "critical"),
    # "the least ranks of one job to compare": at it, compared
    Spec("control.straggler_host", "min_peers", straggler_peers, None, "critical", "critical"),
    # "the share of hosts that must agree": at it, the others are odd
    Spec("network.odd_host", "agree_share", odd_share, None, "warning", "warning"),
    # "the least hosts reporting a fact": at it, compared
    Spec("network.odd_host", "min_hosts", odd_hosts, None, "warning", "warning"),
]
SPECS += CLUSTER_SPECS

TRACE_SPECS = [
    # "the least collective calls a rank must arrive last in": at it, named (the vote alone: a notice)
    Spec("control.slow_rank", "min_votes", votes, None, "notice", "notice"),
    # "the least robust z-score": a rank must be farther out (strictly)
    Spec("network.slow_link", "robust_z", bandwidth_z, None, None, "critical"),
    # "the least ranks of a collective to compare": at it, compared
    Spec("network.slow_link", "min_peers", link_peers, None, "critical", "critical"),
    # "messages of this size or less are judged by the latency rule": inclusive; larger ones by bandwidth
    Spec("network.slow_link", "latency_bound_bytes", latency_message, "critical", "critical", None),
    # "only where the accelerator is free at least this many times the data-loading time": inclusive
    Spec("dataplane.data_loading_bottleneck", "min_free_of_loading", loading_free, None, "critical", "critical"),
]
SPECS += TRACE_SPECS

# overrides that keep the main threshold crossed (the default x 1.5 unless said here)
OVERRIDE = {("control.straggler_host", "min_peers"): 5, ("network.slow_link", "min_peers"): 5, ("network.odd_host", "min_hosts"): 5,
            ("network.odd_host", "agree_share"): 0.99, ("compute.compute_bound", "ipc"): 1.2, ("dataplane.data_loading_bottleneck", "device_idle_pct"): 45}


def _cases() -> list:
    return [pytest.param(spec, side, id=f"{spec.id}-{side}") for spec in SPECS for side in SIDES]


def _specs() -> list:
    return [pytest.param(spec, id=spec.id) for spec in SPECS]


def _override(spec: Spec) -> float:
    return OVERRIDE.get((spec.pattern, spec.param), _default(spec.pattern, spec.param) * 1.5)


def test_every_param_of_the_catalog_has_a_spec():
    assert {(p.id, q.name) for p in catalog().values() for q in p.params} == {(s.pattern, s.param) for s in SPECS}


def test_every_param_is_overridable():
    from witty_profiler.diagnosis.thresholds import effective, validate
    for p in catalog().values():
        for q in p.params:
            overrides = validate({p.id: {q.name: q.value + 1}})
            assert effective(p, overrides)[q.name] == q.value + 1, (p.id, q.name)


@pytest.mark.parametrize("spec, side", _cases())
def test_param_boundary(spec, side):
    _check(spec, _value(_default(spec.pattern, spec.param), side), spec.expected(side))


@pytest.mark.parametrize("spec", _specs())
def test_overriding_the_param_moves_the_boundary(spec):
    new = _override(spec)
    default = _default(spec.pattern, spec.param)
    assert new > default + _eps(default)
    thresholds = {spec.pattern: {spec.param: new}}
    for side in SIDES:
        _check(spec, _value(new, side), spec.expected(side), thresholds=thresholds)
    # the old boundary is now below the new one
    _check(spec, default, spec.below, thresholds=thresholds)


def test_a_param_override_from_a_toml_file(tmp_path):
    path = tmp_path / "thresholds.toml"
    path.write_text('[compute.hot_thread]\nsiblings_cpu_util_pct = 50\n', encoding="utf-8")
    assert diagnose(hot_thread_siblings(40.0)).finding("compute.hot_thread") is None
    f = diagnose(hot_thread_siblings(40.0), thresholds=str(path)).finding("compute.hot_thread")
    assert f is not None and f.severity == "warning"
    assert any(e.threshold == "< 50" for e in f.evidence), [e.threshold for e in f.evidence]
    assert diagnose(hot_thread_siblings(50.0), thresholds=path).finding("compute.hot_thread") is None


def test_evidence_cites_the_params_as_the_pattern_applied_them():
    # a consumer waiting for a CPU exactly max_cpu_wait_pct of the window is still input-bound
    f = diagnose(loading_consumer_wait(50.0)).finding("dataplane.data_loading_bottleneck")
    wait = next(e for e in f.evidence if e.metric == "cpu_wait_pct")
    assert wait.value == 50.0 and wait.threshold == "<= 50"
    busy = next(e for e in f.evidence if e.metric == "runnable_pct")
    assert busy.threshold == "> 50"
    f = diagnose(starvation_wait(10.0)).finding("compute.cpu_starvation")
    assert next(e for e in f.evidence if e.metric == "cpu_wait_pct").threshold == ">= 10"
