"""Layer 6 patterns on hand-built graphs: at, just below and just above every threshold."""

from __future__ import annotations

import pytest

from witty_profiler.diagnosis import diagnose
from witty_profiler.diagnosis.catalog import catalog
from witty_profiler.topology.models import CollectorStatus

from cluster_graphs import ranks_on_hosts
from trace_graphs import step_gap
from diagnosis_graphs import assert_threshold, cgroup, device, host, new_graph, process, thread, threshold_cases, uses


def task_metric(name, **others):
    def build(v):
        g = new_graph()
        process(g, 10, "train", cpu_util_pct=60.0, **{name: v, **others})
        return g
    return build


def psi(v):
    g = new_graph()
    host(g, psi_cpu_some_pct=v)
    process(g, 1, "init", ai=False, role=None, cpu_util_pct=0.0, runqueue_wait_pct=0.0)
    return g


def throttling(name, **others):
    def build(v):
        g = new_graph()
        process(g, 10, "train", cpu_util_pct=90.0)
        cgroup(g, "/jobs/train", members=(10,), cpu_quota_cores=0.5, **{name: v, **others})
        return g
    return build


def futex(v):
    g = new_graph(collectors={"process": "ok", "ebpf": "ok"})
    process(g, 10, "train")
    thread(g, 10, 11, futex_wait_pct=v, futex_lock_wait_pct=v, futex_wakeups_per_s=200.0)
    return g


WORKER = {"cmdline": "python worker.py --shard-size 64"}


def imbalance(v):
    g = new_graph()
    process(g, 1, "launcher", role="launcher")
    process(g, 10, "worker", ppid=1, cpu_util_pct=100.0, attrs=WORKER)
    process(g, 11, "worker", ppid=1, cpu_util_pct=100.0 - v, attrs=WORKER)
    return g


def oversubscription(v):
    g = new_graph()
    process(g, 10, "train", runnable_threads=v * 4, num_threads=64, attrs={"cpus_allowed": "0-3"})
    return g


BUILDERS = {
    ("control.scheduling_latency", "runqueue_wait_pct"): task_metric("runqueue_wait_pct"),
    ("control.scheduling_latency", "runqueue_wait_per_slice_us"): task_metric("runqueue_wait_per_slice_us",
                                                                              runqueue_wait_pct=1.0),
    ("control.scheduling_latency", "psi_cpu_some_pct"): psi,
    ("control.cpu_throttling", "throttled_periods_pct"): throttling("throttled_periods_pct", throttled_ms_per_s=1.0),
    ("control.cpu_throttling", "throttled_ms_per_s"): throttling("throttled_ms_per_s", throttled_periods_pct=1.0),
    ("control.lock_contention", "futex_lock_wait_pct"): futex,
    ("control.load_imbalance", "imbalance_pct"): imbalance,
    ("control.thread_oversubscription", "runnable_per_cpu"): oversubscription,
    # three hosts, one rank each: the third gets v % less CPU than its two peers
    ("control.straggler_host", "deviation_pct"): lambda v: ranks_on_hosts([100.0, 100.0, 100.0 - v]),
    # three trace ranks; the third's exposed communication and free time are 10 v ms apart in 1000 ms steps
    ("control.slow_rank", "gap_pct"): step_gap,
}


def test_every_threshold_of_the_layer_has_a_builder():
    assert {(p.id, t.name) for p in catalog().values() if p.layer == 6 for t in p.thresholds} == set(BUILDERS)


@pytest.mark.parametrize("pattern, name, level, limit, direction", threshold_cases(6))
def test_threshold(pattern, name, level, limit, direction):
    assert_threshold(BUILDERS[(pattern, name)], pattern, level, limit, direction)


def test_idle_tasks_with_a_long_wait_share_are_ignored():
    g = task_metric("runqueue_wait_pct")(90.0)
    g.entity("process:h1:10").metrics["cpu_util_pct"] = 0.5  # one wakeup that waited: noise
    assert diagnose(g).status("control.scheduling_latency") == "clear"


def test_psi_is_evidence_but_not_the_verdict_when_a_workload_is_named():
    g = task_metric("runqueue_wait_pct")(60.0)
    host(g, psi_cpu_some_pct=70.0)
    f = diagnose(g).finding("control.scheduling_latency")
    assert f.severity == "critical" and any(e.metric == "psi_cpu_some_pct" for e in f.evidence)
    g.entity("process:h1:10").metrics["runqueue_wait_pct"] = 1.0
    assert diagnose(g).status("control.scheduling_latency") == "clear"


def test_a_quota_on_an_ancestor_cgroup_counts():
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=50.0)
    cgroup(g, "/kubepods/pod1/ctr", version="v2", members=(10,), throttled_periods_pct=0.0)
    cgroup(g, "/kubepods/pod1", version="v2", throttled_periods_pct=70.0)
    cgroup(g, "/other", version="v2", throttled_periods_pct=90.0)
    f = diagnose(g).finding("control.cpu_throttling")
    assert f.subjects == ["cgroup:h1:v2:/kubepods/pod1"]


def test_imbalance_uses_device_work_when_every_worker_has_it():
    g = imbalance(0.0)
    uses(g, 10, device(g, "npu", "0000:c1:00.0", 0, util_pct=90.0))
    uses(g, 11, device(g, "npu", "0000:c2:00.0", 1, util_pct=50.0))
    f = diagnose(g).finding("control.load_imbalance")
    assert f.severity == "warning" and "util_pct" in f.description


def test_eBPF_patterns_say_what_they_need():
    row = next(c for c in diagnose(imbalance(0.0)).coverage if c.pattern == "control.lock_contention")
    assert row.status == "not_evaluated" and "eBPF" in row.reason and "no ebpf collector ran" in row.reason
    g = imbalance(0.0)
    g.meta.collectors["ebpf"] = CollectorStatus(status="unavailable", reason="eBPF needs root")
    row = next(c for c in diagnose(g).coverage if c.pattern == "control.lock_contention")
    assert row.status == "not_evaluated" and "collector ebpf: unavailable (eBPF needs root)" in row.reason


def test_lock_contention_sets_idle_sleepers_apart_and_names_the_contended_threads():
    g = futex(90.0)  # thread 11: 90 % at 200 wake-ups/s
    thread(g, 10, 12, name="pool", futex_wait_pct=99.0, futex_lock_wait_pct=99.0, futex_wakeups_per_s=0.5)  # idle
    thread(g, 10, 13, name="main", futex_wait_pct=0.0, futex_lock_wait_pct=0.0, futex_wakeups_per_s=0.0)
    f = diagnose(g).finding("control.lock_contention")
    assert f.severity == "critical" and f.subjects == ["thread:h1:10:11"]
    assert "1 thread spends its time waiting on locks" in f.description and "woken 200 times a second" in f.description
    rate = next(e for e in f.evidence if e.metric == "futex_wakeups_per_s")
    assert rate.ids == ["thread:h1:10:11"] and rate.value == 200.0
    assert not any(e.metric == "threads_on_one_lock" for e in f.evidence)  # one thread: no lock in common
    g.entity("thread:h1:10:11").metrics["futex_wakeups_per_s"] = 2.0  # now rarely woken too: idle, not contended
    row = next(c for c in diagnose(g).coverage if c.pattern == "control.lock_contention")
    assert row.status == "clear" and row.reason.startswith("3 threads traced; none was woken") and "2 idle threads slept" in row.reason


def test_a_traced_host_without_a_workload_and_without_waiting_threads_is_clear():
    g = new_graph(collectors={"process": "ok", "ebpf": "ok"})
    process(g, 1, "init", ai=False, role=None, cpu_util_pct=0.0)
    assert diagnose(g).status("control.lock_contention") == "clear"
    # a workload whose threads the collector did not report cannot be judged
    process(g, 10, "train")
    assert diagnose(g).status("control.lock_contention") == "not_evaluated"


def test_idle_worker_groups_are_clear_not_unevaluated():
    g = new_graph()
    process(g, 10, "torchrun", role="launcher", cpu_util_pct=0.5)
    process(g, 11, "worker", ppid=10, cpu_util_pct=4.0, attrs=WORKER)
    process(g, 12, "worker", ppid=10, cpu_util_pct=0.0, attrs=WORKER)
    row = next(c for c in diagnose(g).coverage if c.pattern == "control.load_imbalance")
    assert row.status == "clear" and "all idle" in row.reason, row


def test_lock_contention_clear_line_gives_the_highest_wait_among_threads_woken_often():
    g = futex(20.0)  # woken 200 times a second, but only 20 % of the window in futex waits
    row = next(c for c in diagnose(g).coverage if c.pattern == "control.lock_contention")
    assert row.status == "clear" and row.reason == ("1 thread traced; none of the 1 woken at least 25/s waited "
                                                    "over 30 % of the window on locks (highest 20 %)")


def test_a_poller_woken_by_gil_hand_overs_is_not_waiting_on_a_lock():
    """A thread polling a queue with a timeout, in a process whose other threads hold the GIL: it
    sleeps nearly all the window (timed-out waits) and is woken ~30 times a second when it takes
    the GIL back: judged on the share it waits for the GIL (here 4 %), not on its sleep."""
    g = futex(90.0)
    thread(g, 10, 12, name="poller", futex_wait_pct=99.0, futex_lock_wait_pct=4.0, futex_wakeups_per_s=30.0)
    f = diagnose(g).finding("control.lock_contention")
    assert f.subjects == ["thread:h1:10:11"]
    g.entity("thread:h1:10:11").metrics["futex_lock_wait_pct"] = 2.0  # the lock waiter becomes a poller too
    row = next(c for c in diagnose(g).coverage if c.pattern == "control.lock_contention")
    assert row.status == "clear" and "none of the 2 woken at least 25/s waited over 30 % of the window on locks " \
        "(highest 4 %)" in row.reason, row


def test_contended_threads_waiting_on_one_lock_are_grouped():
    g = futex(90.0)
    g.entity("thread:h1:10:11").attrs["futex_addr"] = "0x55d0c0de0"
    thread(g, 10, 12, attrs={"futex_addr": "0x55d0c0de0", "futex_mapping": "[heap]"},
           futex_wait_pct=80.0, futex_lock_wait_pct=80.0, futex_wakeups_per_s=300.0)
    thread(g, 10, 13, attrs={"futex_addr": "0x7f00aa10"},  # contended too, on another lock
           futex_wait_pct=70.0, futex_lock_wait_pct=70.0, futex_wakeups_per_s=300.0)
    f = diagnose(g).finding("control.lock_contention")
    assert len(f.subjects) == 3 and f.description.endswith("; 2 of them wait mostly on one lock (futex 0x55d0c0de0).")
    [group] = [e for e in f.evidence if e.metric == "threads_on_one_lock"]
    assert group.ids == ["thread:h1:10:11", "thread:h1:10:12"] and group.value == 2
    assert group.note == "wait mostly on one lock: the futex at 0x55d0c0de0 in [heap]"  # as 12 saw it


def bursty(per_slice_us):
    g = new_graph()
    process(g, 10, "writer", cpu_util_pct=10.0, runqueue_wait_pct=90.0, runqueue_wait_ms_per_s=300.0,
            runqueue_wait_per_slice_us=per_slice_us, timeslices_per_s=3000.0)
    return g


def test_a_large_wait_share_made_of_short_waits_is_not_scheduling_latency():
    for value in (25.0, 999.0, 1000.0):
        row = next(c for c in diagnose(bursty(value)).coverage if c.pattern == "control.scheduling_latency")
        assert row.status == "clear", row
        assert "short waits" in row.reason, row.reason
    f = diagnose(bursty(1001.0)).finding("control.scheduling_latency")
    assert f.severity == "critical"  # 90 % of its runnable time, over 1 ms at a time
    lowered = {"control.scheduling_latency": {"min_wait_per_slice_us": 10}}
    assert diagnose(bursty(25.0), thresholds=lowered).finding("control.scheduling_latency").severity == "critical"


def quota_bound(throttled_pct=100.0, path="/jobs/train", member_path=None):
    """A process held back by its cgroup's CPU quota: it runs 10 % of a core, waits 80 % of the
    window (24 ms a slice), and the quota stalls its cgroup 800 ms a second."""
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=10.0, runqueue_wait_pct=89.0, runqueue_wait_ms_per_s=800.0,
            runqueue_wait_per_slice_us=24000.0, timeslices_per_s=33.0)
    cgroup(g, path, members=() if member_path else (10,), cpu_quota_cores=0.1, throttled_periods_pct=throttled_pct,
           throttled_ms_per_s=800.0 * throttled_pct / 100)
    if member_path:
        cgroup(g, member_path, members=(10,), throttled_periods_pct=0.0)
    return g


COMPETE = ("stop what competes", "move other busy processes away")


@pytest.mark.parametrize("pattern", ["compute.cpu_starvation", "control.scheduling_latency"])
def test_waiting_for_a_cpu_quota_names_the_throttling_not_the_competition(pattern):
    d = diagnose(quota_bound())
    assert d.finding("control.cpu_throttling") is not None
    f = d.finding(pattern)
    assert f is not None and "control.cpu_throttling" in f.related, f
    assert "quota" in f.description and "cgroup v1:/jobs/train" in f.description, f.description
    assert not any(c in r for r in f.recommendations for c in COMPETE), f.recommendations
    assert "quota" in f.recommendations[0], f.recommendations
    assert any(e.ids == ["cgroup:h1:v1:/jobs/train"] and e.metric == "throttled_ms_per_s" for e in f.evidence)


@pytest.mark.parametrize("pattern", ["compute.cpu_starvation", "control.scheduling_latency"])
def test_a_quota_on_an_ancestor_cgroup_is_the_cause_too(pattern):
    f = diagnose(quota_bound(path="/kubepods/pod1", member_path="/kubepods/pod1/ctr")).finding(pattern)
    assert "control.cpu_throttling" in f.related and "cgroup v1:/kubepods/pod1" in f.description, f.description


@pytest.mark.parametrize("pattern", ["compute.cpu_starvation", "control.scheduling_latency"])
def test_waiting_without_throttling_keeps_the_competition_advice(pattern):
    f = diagnose(quota_bound(throttled_pct=1.0)).finding(pattern)  # a quota that hardly bites
    assert "control.cpu_throttling" not in f.related and "quota" not in f.description
    assert any(c in r for r in f.recommendations for c in COMPETE), f.recommendations


@pytest.mark.parametrize("pattern", ["compute.cpu_starvation", "control.scheduling_latency"])
def test_a_quota_behind_one_of_two_waiting_processes_adds_its_advice_first(pattern):
    g = quota_bound()
    process(g, 20, "train2", cpu_util_pct=10.0, runqueue_wait_pct=89.0, runqueue_wait_ms_per_s=800.0,
            runqueue_wait_per_slice_us=24000.0)  # waits too, in no throttled cgroup
    f = diagnose(g).finding(pattern)
    assert "control.cpu_throttling" in f.related
    assert "quota" in f.recommendations[0] and any(c in r for r in f.recommendations for c in COMPETE)


def test_siblings_with_one_name_but_different_command_lines_are_not_one_job():
    g = new_graph()
    process(g, 1, "bash", role="launcher")
    process(g, 10, "python3", ppid=1, cpu_util_pct=100.0, attrs={"cmdline": "python3 train.py"})
    process(g, 11, "python3", ppid=1, cpu_util_pct=3.0, attrs={"cmdline": "python3 watch_gpus.py"})
    row = next(c for c in diagnose(g).coverage if c.pattern == "control.load_imbalance")
    assert row.status == "clear", row
    g.entity("process:h1:11").attrs["cmdline"] = "python3 train.py"  # two copies of one program: one job
    assert diagnose(g).finding("control.load_imbalance").severity == "critical"


def test_workers_whose_command_lines_differ_only_in_numbers_are_one_job():
    """vLLM's tensor-parallel workers are multiprocessing spawns that differ in a pipe handle: one job."""
    g = new_graph()
    process(g, 1, "python3", role="inference")
    spawn = "python3 -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=25, pipe_handle={}) " \
            "--multiprocessing-fork"
    for pid, (handle, cpu) in enumerate(((31, 95.0), (34, 94.0), (37, 96.0), (40, 20.0)), start=10):
        process(g, pid, "python3", ppid=1, role="inference", cpu_util_pct=cpu, attrs={"cmdline": spawn.format(handle)})
    finding = diagnose(g).finding("control.load_imbalance")
    assert finding is not None and "process:h1:13" in finding.subjects


def test_siblings_without_command_lines_cannot_be_grouped():
    g = new_graph()
    process(g, 1, "bash", role="launcher")
    process(g, 10, "python3", ppid=1, cpu_util_pct=100.0)
    process(g, 11, "python3", ppid=1, cpu_util_pct=3.0)
    row = next(c for c in diagnose(g).coverage if c.pattern == "control.load_imbalance")
    assert row.status == "not_evaluated" and "command line" in row.reason, row


def rank(g, pid, r, cpu, ppid=None, port="29500", world=2, name="python3", cmdline=None):
    env = {"RANK": str(r), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    attrs = {"rank": r, "world_size": world, "env": env, "cmdline": cmdline or f"python3 train.py --port {port}"}
    return process(g, pid, name, ppid=ppid, cpu_util_pct=cpu, attrs=attrs)


def test_ranks_of_one_world_are_compared_whatever_their_parents():
    g = new_graph()
    rank(g, 10, 0, 95.0, ppid=1, cmdline="python3 train.py --node 0")
    rank(g, 20, 1, 30.0, ppid=2, cmdline="python3 train.py --node 1")
    f = diagnose(g).finding("control.load_imbalance")
    assert f is not None and f.subjects == ["process:h1:10", "process:h1:20"]
    assert "2 ranks of one job" in f.description, f.description


def test_ranks_of_two_worlds_are_not_compared():
    g = new_graph()
    rank(g, 10, 0, 95.0, ppid=1, port="29500", world=1)
    rank(g, 20, 0, 20.0, ppid=2, port="29600", world=1)
    row = next(c for c in diagnose(g).coverage if c.pattern == "control.load_imbalance")
    assert row.status == "clear", row


def test_a_child_that_inherited_its_parents_rank_is_not_another_rank():
    g = new_graph()
    process(g, 1, "torchrun", role="launcher")
    rank(g, 10, 0, 90.0, ppid=1)
    rank(g, 11, 1, 88.0, ppid=1)
    rank(g, 12, 0, 1.0, ppid=10, name="sh", cmdline="sh -c nvidia-smi")  # spawned by rank 0, same environment
    row = next(c for c in diagnose(g).coverage if c.pattern == "control.load_imbalance")
    assert row.status == "clear", row


def test_a_value_crossing_the_min_work_bound_does_not_flip_the_verdict():
    bound = next(p.value for p in catalog()["control.load_imbalance"].params if p.name == "min_work_pct")
    verdicts = []
    for busiest in (bound * 1.002, bound * 0.998):
        g = new_graph()
        process(g, 1, "launcher", role="launcher")
        process(g, 10, "worker", ppid=1, cpu_util_pct=busiest, attrs=WORKER)
        process(g, 11, "worker", ppid=1, cpu_util_pct=bound * 0.1, attrs=WORKER)
        d = diagnose(g)
        f = d.finding("control.load_imbalance")
        verdicts.append((d.status("control.load_imbalance"), f.severity if f else None))
    assert verdicts[0] == verdicts[1], verdicts
