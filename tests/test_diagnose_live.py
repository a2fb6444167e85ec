"""Bottlenecks created for real on this host, collected live and diagnosed.

Each test starts real processes (busy loops, a pipe between a CPU-bound producer and a blocked
consumer, a busy process in a v1 cpu cgroup with a small quota, a reader under a memory limit
smaller than its file), collects a 2-3 s window and
checks the diagnosis. The host is shared with other work, so the tests ask for what contention
cannot take away: more busy loops than CPUs always saturate them; a producer that is not running
is still runnable.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from witty_profiler import collect, diagnose
from witty_profiler.diagnosis.catalog import catalog

from cgroup_v1 import FAST_READER, busy_in_quota_cgroup, reader_in_memory_cgroup

pytestmark = pytest.mark.live

BUSY = "while True: pass"
PRODUCER = ("import sys, time\n"
            "while True:\n"
            "    t = time.time()\n"
            "    while time.time() - t < 0.2: pass\n"
            "    sys.stdout.buffer.write(b'x'); sys.stdout.flush()\n")
CONSUMER = "import sys\nwhile sys.stdin.buffer.read(1): pass\n"
SLEEPER = "import time\ntime.sleep(120)\n"
COLLECTORS = ["process", "cpu", "pressure", "memory", "ipc", "cgroup"]


def _stop(*procs: subprocess.Popen) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def test_more_busy_processes_than_cpus():
    n = (os.cpu_count() or 1) * 2 + 1
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(n)]
    try:
        time.sleep(0.3)
        pids = [p.pid for p in busy]
        g = collect(2.5, 0.5, pids=pids, collectors=COLLECTORS)
    finally:
        _stop(*busy)
    d = diagnose(g, pids=pids)
    (host,) = g.entities("host")
    # no CPU was ever idle: what the loops did not get, the hypervisor took, and the pattern counts both
    assert host.metrics["cpu_util_pct"] + host.metrics.get("cpu_steal_pct", 0.0) > 90, host.metrics
    saturation = d.finding("compute.cpu_saturation")
    assert saturation is not None, d.coverage
    assert saturation.severity in ("critical", "warning")
    latency = d.finding("control.scheduling_latency")
    assert latency is not None, next(c.reason for c in d.coverage if c.pattern == "control.scheduling_latency")
    waiting = {e.ids[0] for e in latency.evidence if e.metric == "runqueue_wait_pct"}
    host = g.meta.hosts[0]
    assert waiting & {f"process:{host}:{pid}" for pid in pids}


def test_consumer_blocked_on_a_pipe_from_a_cpu_bound_producer():
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER], stdout=subprocess.PIPE)
    consumer = subprocess.Popen([sys.executable, "-c", CONSUMER], stdin=producer.stdout, stdout=subprocess.DEVNULL)
    producer.stdout.close()
    try:
        time.sleep(0.3)
        g = collect(2.5, 0.5, pids=[consumer.pid], collectors=COLLECTORS)
    finally:
        _stop(producer, consumer)
    d = diagnose(g, pids=[consumer.pid])
    f = d.finding("dataplane.data_loading_bottleneck")
    assert f is not None, next(c.reason for c in d.coverage if c.pattern == "dataplane.data_loading_bottleneck")
    host = g.meta.hosts[0]
    assert f.subjects == [f"process:{host}:{consumer.pid}"]
    edge_ids = [e.ids[0] for e in f.evidence if e.kind == "edge"]
    assert f"pipe|process:{host}:{producer.pid}|process:{host}:{consumer.pid}" in edge_ids
    assert any(e.ids == [f"process:{host}:{producer.pid}"] and e.metric == "runnable_pct" for e in f.evidence)
    # the consumer's low CPU is explained by its input, not reported as starvation of its own
    starving = d.finding("compute.cpu_starvation")
    assert starving is None or (starving.severity == "notice" and f.pattern in starving.related)


@pytest.fixture
def quota_cgroup():
    with busy_in_quota_cgroup("witty-test-diagnose") as found:
        yield found


def test_busy_process_in_a_cgroup_with_a_small_quota(quota_cgroup):
    group, busy = quota_cgroup
    g = collect(2.0, 0.5, pids=[busy.pid], collectors=COLLECTORS)
    d = diagnose(g, pids=[busy.pid])
    f = d.finding("control.cpu_throttling")
    assert f is not None, next(c.reason for c in d.coverage if c.pattern == "control.cpu_throttling")
    host = g.meta.hosts[0]
    assert f.subjects == [f"cgroup:{host}:v1:/{group.name}"]
    assert f.severity == "critical"  # a 0.1-core quota on a busy loop throttles nearly every period
    assert any(e.metric == "cpu_quota_cores" and e.value == 0.1 for e in f.evidence)
    assert any(e.kind == "edge" and e.ids[0].startswith(f"in_cgroup|process:{host}:{busy.pid}|") for e in f.evidence)
    # the loop waits for a CPU nearly all the window: the quota's doing, not other processes'
    for pattern in ("compute.cpu_starvation", "control.scheduling_latency"):
        waiting = d.finding(pattern)
        assert waiting is not None, next(c.reason for c in d.coverage if c.pattern == pattern)
        assert "control.cpu_throttling" in waiting.related and "quota" in waiting.recommendations[0], waiting
        assert not any("competes" in r or "other busy processes" in r for r in waiting.recommendations)


def test_a_reader_under_a_small_memory_limit_is_memory_pressure(tmp_path):
    with reader_in_memory_cgroup("witty-test-diagnose-mem", tmp_path / "data") as (group, reader):
        g = collect(2.0, 0.5, pids=[reader.pid], collectors=COLLECTORS)
    d = diagnose(g, pids=[reader.pid])
    f = d.finding("memory.pressure")
    assert f is not None, next(c.reason for c in d.coverage if c.pattern == "memory.pressure")
    cid = f"cgroup:{g.meta.hosts[0]}:v1:/{group.name}"
    assert cid in f.subjects, f.subjects
    cited = {e.metric: e for e in f.evidence if e.ids == [cid]}
    assert cited["major_faults_per_s"].threshold is not None and cited["major_faults_per_s"].value > 500
    assert cited["memory_limit_bytes"].value == 16 << 20 and cited["memory_limit_hits_per_s"].value > 0


def test_idle_host_has_no_p0():
    sleeper = subprocess.Popen([sys.executable, "-c", SLEEPER])
    try:
        time.sleep(0.2)
        g = collect(2.0, 0.5, pids=[sleeper.pid], collectors=COLLECTORS)
    finally:
        _stop(sleeper)
    d = diagnose(g, pids=[sleeper.pid])
    host = g.entity(f"host:{g.meta.hosts[0]}")
    me = f"process:{g.meta.hosts[0]}:{sleeper.pid}"
    p0 = [f for f in d.findings if f.priority == "P0"]
    # the sleeping workload itself is never a P0, and a P0 may only be about the host itself,
    # whatever else the shared host is doing (a neighbour's I/O or memory use included)
    assert not [f for f in p0 if me in f.subjects], [f.description for f in p0]
    assert all(s.startswith(("host:", "cpu:", "block_device:")) for f in p0 for s in f.subjects), \
        [f.description for f in p0]
    # quiet: CPUs mostly idle and nothing stalled on CPU, I/O or memory (a neighbour's disk or memory
    # use makes the host itself a P0 subject, which is right)
    calm = {"cpu_util_pct": 50, "psi_cpu_some_pct": 20, "cpu_iowait_pct": 10, "psi_io_some_pct": 10,
            "psi_memory_some_pct": 5}
    quiet = host is not None and "cpu_util_pct" in host.metrics and \
        all(host.metrics.get(m, 0.0) < limit for m, limit in calm.items())
    if quiet:
        assert p0 == [], [f.description for f in p0]


def test_diagnose_without_a_graph_collects_first(tmp_path, capsys):
    from witty_profiler.cli import main
    out = tmp_path / "report.json"
    assert main(["diagnose", "--duration", "1", "--interval", "0.5", "-q", "--format", "json", "-o", str(out)]) == 0
    import json
    data = json.loads(out.read_text())
    assert data["summary"]["source"] == "live" and data["summary"]["duration_s"] >= 0.9
    assert len(data["coverage"]) == len(catalog())  # every pattern has its row


TCP_READER = ("import socket, time\n"
              "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
              "print(s.getsockname()[1], flush=True)\n"
              "c, _ = s.accept()\n"
              "while c.recv(4096): time.sleep(0.1)\n")  # 40 KB/s at most
TCP_WRITER = ("import socket, sys, time\n"
              "c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
              "while True: c.sendall(b'x' * 65536); time.sleep(0.1)\n")  # 640 KB/s


def test_a_tcp_connection_to_a_slow_reader_is_an_ipc_backlog():
    reader = subprocess.Popen([sys.executable, "-c", TCP_READER], stdout=subprocess.PIPE, text=True)
    writer = None
    try:
        port = reader.stdout.readline().strip()
        writer = subprocess.Popen([sys.executable, "-c", TCP_WRITER, port])
        time.sleep(0.3)
        pids = [reader.pid, writer.pid]
        g = collect(2.0, 0.5, pids=pids, collectors=COLLECTORS)
    finally:
        _stop(*[p for p in (writer, reader) if p is not None])
    host = g.meta.hosts[0]
    edge = g.edge(f"tcp|process:{host}:{writer.pid}|process:{host}:{reader.pid}")
    assert edge is not None and edge.attrs["queued_toward"] == "target", [e.id for e in g.edges("tcp")]
    # about 600 KB/s more written than read, wherever the kernel keeps it (receive or send queue)
    assert edge.metrics["queued_bytes_growth_per_s"] > 300_000, edge.metrics
    d = diagnose(g, pids=pids)
    f = d.finding("dataplane.ipc_backlog")
    assert f is not None, next(c.reason for c in d.coverage if c.pattern == "dataplane.ipc_backlog")
    assert f.subjects == [f"process:{host}:{reader.pid}"]
    assert any(e.ids == [edge.id] and e.metric == "queued_bytes_growth_per_s" for e in f.evidence)


FSYNC_WRITER = ("import os, sys\n"
                "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)\n"
                "while True:\n"
                "    os.pwrite(fd, b'x' * 512, 0); os.fsync(fd)\n")


def _on_tmpfs(path) -> bool:
    best, fstype = "", ""
    with open("/proc/self/mounts") as f:
        for line in f:
            mount, kind = line.split()[1:3]
            if str(path).startswith(mount.rstrip("/") + "/") and len(mount) > len(best):
                best, fstype = mount, kind
    return fstype in ("tmpfs", "ramfs")


@pytest.mark.slow
@pytest.mark.parametrize("competitors", [0, os.cpu_count() or 1], ids=["alone", "beside-busy-loops"])
def test_a_synchronous_writer_in_short_bursts_is_neither_starved_nor_delayed(tmp_path, competitors):
    """Thousands of fsyncs a second: the writer runs for microseconds and sleeps; it waits for a
    CPU at each wake-up, many times a second but briefly each time."""
    if _on_tmpfs(tmp_path):
        pytest.skip("fsync returns at once on tmpfs: needs a disk-backed temporary directory")
    writer = subprocess.Popen([sys.executable, "-c", FSYNC_WRITER, str(tmp_path / "log")])
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(competitors)]
    try:
        time.sleep(0.3)
        g = collect(2.0, 0.5, pids=[writer.pid], collectors=COLLECTORS)
    finally:
        _stop(writer, *busy)
    w = g.entity(f"process:{g.meta.hosts[0]}:{writer.pid}")
    if w.metrics.get("timeslices_per_s", 0) < 500 or w.metrics.get("runqueue_wait_per_slice_us", 1e9) >= 1000:
        pytest.skip(f"this disk or scheduler does not make short bursts: {w.metrics}")
    d = diagnose(g, pids=[writer.pid])
    for pattern in ("compute.cpu_starvation", "control.scheduling_latency"):
        assert d.finding(pattern) is None, (pattern, d.finding(pattern).description, w.metrics)


DUTY = ("import os, time\n"  # busy for the share of each 10 ms given in WORK, asleep for the rest
        "work = float(os.environ['WORK'])\n"
        "while True:\n"
        "    t = time.perf_counter()\n"
        "    while time.perf_counter() - t < 0.01 * work: pass\n"
        "    time.sleep(0.01 * (1 - work))\n")


def test_load_imbalance_compares_copies_of_one_program_not_any_two_children():
    """Two copies of one command line, one busy 90 % and one 10 %, are one job out of balance; a
    busy loop beside a sleeper, both python children of this test, are not one job."""
    copies = [subprocess.Popen([sys.executable, "-c", DUTY], env={**os.environ, "WORK": w}) for w in ("0.9", "0.1")]
    others = [subprocess.Popen([sys.executable, "-c", BUSY]), subprocess.Popen([sys.executable, "-c", SLEEPER])]
    try:
        time.sleep(0.3)
        pids = [p.pid for p in copies + others]
        g = collect(2.0, 0.5, pids=pids, collectors=COLLECTORS)
    finally:
        _stop(*copies, *others)
    host = g.meta.hosts[0]
    d = diagnose(g, pids=pids)
    f = d.finding("control.load_imbalance")
    assert f is not None, next(c.reason for c in d.coverage if c.pattern == "control.load_imbalance")
    assert f.subjects == sorted(f"process:{host}:{p.pid}" for p in copies), (f.subjects, f.description)
    assert "2 workers running one command line" in f.description


def test_io_wait_of_readers_thrashing_under_a_memory_limit_is_paging(tmp_path):
    """Two readers of a 64 MiB file under a 16 MiB limit, touching its pages as fast as they come:
    every page was evicted since their last pass and is read back from disk. The I/O wait and the
    memory pressure are one cause."""
    with reader_in_memory_cgroup("witty-test-diagnose-thrash", tmp_path / "data", others=1,
                                 code=FAST_READER) as (group, reader):
        g = collect(2.0, 0.5, pids=[reader.pid], collectors=COLLECTORS)
    d = diagnose(g, pids=[reader.pid])
    pressure, io = d.finding("memory.pressure"), d.finding("storage.io_wait")
    assert pressure is not None, next(c.reason for c in d.coverage if c.pattern == "memory.pressure")
    if io is None:
        host = g.entity(f"host:{g.meta.hosts[0]}")
        pytest.skip(f"this disk answered fast enough that no I/O wait built up: {host.metrics.get('psi_io_some_pct')} "
                    f"% PSI io, {host.metrics.get('cpu_iowait_pct')} % iowait")
    assert "memory.pressure" in io.related and "storage.io_wait" in pressure.related, (io.related, pressure.related)
    assert "paging" in io.description and "memory.pressure" in io.recommendations[0], io.description
