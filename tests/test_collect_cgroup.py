"""Processes in v1 cgroups: the cgroup collector must see a CPU quota and its throttling, a memory
limit, its hits and the major faults it causes, and link each process to its cgroup; a v2 tree in
the kernel's file formats, read through a /proc and a cgroup2 mount of its own."""

from __future__ import annotations

import pytest

from witty_profiler.collectors.engine import run_window

from cgroup_v1 import busy_in_quota_cgroup, reader_in_memory_cgroup


@pytest.fixture
def quota_cgroup():
    with busy_in_quota_cgroup("witty-test") as found:
        yield found


@pytest.mark.live
def test_throttling_of_a_busy_process_in_a_quota_cgroup(quota_cgroup):
    group, busy = quota_cgroup
    g = run_window(1.5, 0.5, pids=[busy.pid], collectors=["process", "cgroup"])
    assert g.meta.collectors["cgroup"].status == "ok", g.meta.collectors["cgroup"]
    host = g.meta.hosts[0]
    cid = f"cgroup:{host}:v1:/{group.name}"
    cg = g.entity(cid)
    assert cg is not None, [e.id for e in g.entities("cgroup")]
    assert cg.attrs["version"] == "v1" and "cpu" in cg.attrs["controllers"]
    assert cg.metrics["cpu_quota_cores"] == 0.1
    assert cg.metrics["throttled_periods_pct"] > 20, cg.metrics
    assert cg.metrics["throttled_ms_per_s"] > 100, cg.metrics  # wants ~1000 ms/s, may run 100
    # cpuacct is a separate v1 hierarchy here (the process stays in its root), so the cgroup's own
    # CPU use may be absent; the process's is not
    proc = g.entity(f"process:{host}:{busy.pid}")
    assert proc.metrics["cpu_util_pct"] < 30 and proc.attrs["cgroup"] == f"/{group.name}"
    assert [t.id for _, t in g.neighbours(proc.id, "out", "in_cgroup")].count(cid) == 1
    # only the cgroups of the processes in scope are in the fragment
    assert all(g.neighbours(c.id, "in", "in_cgroup") for c in g.entities("cgroup"))


@pytest.mark.live
def test_memory_limit_hits_and_major_faults_of_a_reader_in_a_memory_cgroup(tmp_path):
    with reader_in_memory_cgroup("witty-test-mem", tmp_path / "data") as (group, reader):
        g = run_window(1.5, 0.5, pids=[reader.pid], collectors=["process", "cgroup"])
    host = g.meta.hosts[0]
    cg = g.entity(f"cgroup:{host}:v1:/{group.name}")
    assert cg is not None and "memory" in cg.attrs["controllers"], [e.id for e in g.entities("cgroup")]
    m = cg.metrics
    assert m["memory_limit_bytes"] == 16 << 20 and m["memory_usage_bytes"] > (16 << 20) * 0.8, m
    # one page per fault, each evicted since its last read: thousands a second even on a loaded host
    assert m["major_faults_per_s"] > 500 and m["major_faults_per_s_max"] >= m["major_faults_per_s"] * 0.9, m
    assert m["memory_limit_hits_per_s"] > 0, m
    proc = g.entity(f"process:{host}:{reader.pid}")
    assert proc.metrics["major_faults_per_s"] == pytest.approx(m["major_faults_per_s"], rel=0.2)


V2_GROUP = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f2e.slice/cri-containerd-9a8b.scope"


def _v2_counters(directory, usage_usec, periods, throttled, throttled_usec, majfault, max_hits, psi_us):
    # the files of a cgroup v2 directory, in the kernel's formats (Documentation/admin-guide/cgroup-v2.rst)
    (directory / "cpu.stat").write_text(
        f"usage_usec {usage_usec}\nuser_usec {usage_usec * 3 // 4}\nsystem_usec {usage_usec // 4}\n"
        f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_usec {throttled_usec}\nnr_bursts 0\nburst_usec 0\n")
    (directory / "memory.stat").write_text(
        f"anon 104857600\nfile 52428800\nkernel 4194304\nshmem 0\npgfault 900000\npgmajfault {majfault}\n"
        "workingset_refault_file 0\n")
    (directory / "memory.events").write_text(f"low 0\nhigh 0\nmax {max_hits}\noom 0\noom_kill 0\noom_group_kill 0\n")
    for resource in ("cpu", "io", "memory"):
        (directory / f"{resource}.pressure").write_text(
            f"some avg10=0.00 avg60=0.00 avg300=0.00 total={psi_us}\nfull avg10=0.00 avg60=0.00 avg300=0.00 "
            f"total={psi_us // 2}\n")


def test_a_cgroup_v2_tree_in_the_kernels_formats(tmp_path, monkeypatch):
    import witty_profiler.collectors.cgroup as cgroup_module
    from witty_profiler.collectors.base import Context
    from witty_profiler.collectors.cgroup import CgroupCollector

    mount, proc = tmp_path / "cgroup", tmp_path / "proc"
    group = mount / V2_GROUP.lstrip("/")
    group.mkdir(parents=True)
    (mount / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mounts").write_text(f"cgroup2 {mount} cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n")
    (proc / "4242").mkdir()
    (proc / "4242" / "cgroup").write_text(f"0::{V2_GROUP}\n")
    (group / "cpu.max").write_text("50000 100000\n")
    (group / "memory.current").write_text("161480704\n")
    (group / "memory.max").write_text("268435456\n")
    clock = iter([100.0, 102.0])  # start and end of a 2 s window
    monkeypatch.setattr(cgroup_module.time, "monotonic", lambda: next(clock))
    c = CgroupCollector(Context(host="n1", proc=proc, pids=None))
    _v2_counters(group, usage_usec=1_000_000, periods=100, throttled=10, throttled_usec=50_000, majfault=1000,
                 max_hits=5, psi_us=0)
    c.start()
    # 2 s later: 1 s of CPU (50 % of a core), 20 periods of which 15 throttled for 600 ms, 400 major faults
    _v2_counters(group, usage_usec=2_000_000, periods=120, throttled=25, throttled_usec=650_000, majfault=1400,
                 max_hits=25, psi_us=400_000)
    g = c.finish()
    assert c.status.status == "ok", c.status
    cg = g.entity(f"cgroup:n1:v2:{V2_GROUP}")
    assert cg is not None, [e.id for e in g.entities()]
    assert cg.attrs["version"] == "v2" and cg.attrs["controllers"] == ["v2"]
    m = cg.metrics
    assert m["cpu_quota_cores"] == 0.5 and m["cpu_util_pct"] == 50.0
    assert m["throttled_periods_pct"] == 75.0 and m["throttled_ms_per_s"] == 300.0
    assert m["major_faults_per_s"] == 200.0 and m["memory_limit_hits_per_s"] == 10.0
    assert m["memory_usage_bytes"] == 161480704 and m["memory_limit_bytes"] == 268435456
    assert m["psi_memory_some_pct"] == 20.0 and m["psi_memory_full_pct"] == 10.0 and m["psi_io_some_pct"] == 20.0
    assert [e.source for e in g.edges("in_cgroup")] == ["process:n1:4242"]
