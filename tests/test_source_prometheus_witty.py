"""This tool's exporter read back from Prometheus (sources/promwitty.py).

Without an engine: a graph is exported (witty_profiler.exporter), its exposition read as a range
query gives it, and the read-back must hold the same processes, threads, placement and devices,
and the patterns must judge them. Live: the real `witty-profiler export --listen` runs in a host of
tests/prometheus_stack.py beside a busy process this test starts, the real Prometheus scrapes it,
and `collect --prometheus` must give that process back, placed, with a pattern judging it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import diagnosis_graphs as dg
from tests.prometheus_stack import Command, running_stack
from tests.test_source_prometheus_accel import DCGM, IDLE_GPU, rows as fixture_rows
from witty_profiler import diagnose
from witty_profiler.exporter import exposition
from witty_profiler.sources.promaccel import add_gpus
from witty_profiler.sources.prometheus import collect_window
from witty_profiler.sources.promwitty import add_witty
from witty_profiler.topology.graph import Graph
from witty_profiler.topology.models import Meta

STEPS = 11
T0 = 1_796_288_400.0


def exposition_rows(text: str, host: str, changes: dict | None = None) -> list[tuple[str, dict, list]]:
    """An exposition's samples as a range query of STEPS one-second steps gives them; `changes` maps a
    metric name to a function of (labels, step) giving the value at that step (else it is constant)."""
    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            vary = (changes or {}).get(s.name)
            values = [(T0 + i, vary(s.labels, i) if vary else s.value) for i in range(STEPS)]
            out.append((host, {"__name__": s.name, **s.labels}, values))
    return out


def exported_graph() -> Graph:
    """A trainer on NUMA node 0 using a GPU of node 1 (the fixture's idle H100), with busy threads."""
    g = dg.new_graph()
    dg.two_numa_host(g)
    dg.process(g, 10, name="trainer", attrs={"rank": 3}, cpu_util_pct=180.0, numa_remote_pages_pct=75.0,
               cpu_mem_colocation_pct=40.0, runqueue_wait_pct=12.5, rss_bytes=8 * 2 ** 30, runnable_threads=3,
               write_burst_s=42.0)
    gpu = dg.device(g, "gpu", IDLE_GPU, 1, numa_node=1)
    dg.uses(g, 10, gpu)
    for tid in range(10, 13):
        dg.thread(g, 10, tid, name=f"t{tid}", cpu_util_pct=30.0 * (tid - 9), runqueue_wait_pct=10.0)
    dg.runs_on(g, 10, 10, 0, 9e9)
    dg.runs_on(g, 10, 11, 1, 1e9)
    dg.allocates_on(g, 10, 0, 4000)
    dg.allocates_on(g, 10, 1, 12000)
    dg.process(g, 20, name="sshd", ai=False, role=None, cpu_util_pct=1.0)
    return g


@pytest.fixture(scope="module")
def read_back() -> tuple[Graph, Graph]:
    source = exported_graph()
    text = exposition(source, diagnose(source))
    # the trainer's CPU rose over the window: 120 % .. 220 %
    rise = {"witty_process_cpu_utilisation_ratio": lambda labels, i: (1.2 + i / 10) if labels["pid"] == "10" else 0.01}
    g = Graph(Meta(hosts=["h1"], source="prometheus", host_info={"h1": {"cpus": 8}}))
    add_gpus(g, fixture_rows(DCGM, "h1"))
    status = add_witty(g, exposition_rows(text, "h1", rise), 1.0, ["h1"])
    assert status.status == "ok", status.reason
    return source, g


def test_processes_threads_and_placement_come_back(read_back):
    _, g = read_back
    trainer = g.entity("process:h1:10")
    assert trainer.attrs == {"pid": 10, "name": "trainer", "role": "trainer", "ai": True, "rank": 3}
    assert trainer.metrics["cpu_util_pct"] == pytest.approx(170.0)  # mean of 120..220
    assert trainer.metrics["cpu_util_pct_max"] == pytest.approx(220.0)
    assert trainer.metrics["cpu_util_pct_p95"] == pytest.approx(220.0)  # nearest rank of 11 samples
    assert trainer.metrics["runqueue_wait_pct"] == pytest.approx(12.5)
    assert trainer.metrics["numa_remote_pages_pct"] == pytest.approx(75.0)
    assert trainer.metrics["cpu_mem_colocation_pct"] == pytest.approx(40.0)
    assert trainer.metrics["rss_bytes"] == 8 * 2 ** 30
    assert trainer.metrics["runnable_threads_p95"] == 3 and trainer.metrics["write_burst_s"] == 42.0
    assert g.entity("process:h1:20").attrs["ai"] is False
    threads = sorted(t.id for t in g.entities("thread"))
    assert threads == ["thread:h1:10:10", "thread:h1:10:11", "thread:h1:10:12"]
    assert g.entity("thread:h1:10:12").metrics["cpu_util_pct"] == pytest.approx(90.0)
    runs = {e.target: e.metrics["runtime_share_pct"] for e in g.edges("runs_on")}
    assert runs == {"numa_node:h1:0": pytest.approx(90.0), "numa_node:h1:1": pytest.approx(10.0)}
    pages = {e.target: e.metrics["pages"] for e in g.edges("allocates_on")}
    assert pages == {"numa_node:h1:0": 4000, "numa_node:h1:1": 12000}
    uses = [(e.source, e.target) for e in g.edges("uses_device")]
    assert uses == [("process:h1:10", f"gpu:h1:{IDLE_GPU}")]
    gpu = g.entity(f"gpu:h1:{IDLE_GPU}")
    assert gpu.attrs["numa_node"] == 1 and "H100" in gpu.attrs["name"]  # the dcgm-exporter entity, joined
    assert [(e.source, e.target) for e in g.edges("local_to")] == [(gpu.id, "numa_node:h1:1")]


def test_exporter_findings_are_recorded_facts(read_back):
    source, g = read_back
    recorded = g.meta.extra["exporter_findings"]
    assert {f["pattern"] for f in recorded} == {f.pattern for f in diagnose(source).findings}
    for f in recorded:
        assert f["host"] == "h1" and f["source"] == f"witty-profiler export on {dg.H}"
        assert f["first_seen"] == "2026-12-03T09:00:00Z" and f["last_seen"] == "2026-12-03T09:00:10Z"
        assert f["reported_s"] == STEPS


def test_the_report_shows_them_apart_from_its_own_findings(read_back):
    from witty_profiler import report
    source, g = read_back
    d = diagnose(g)
    assert d.summary["exporter_findings"] == g.meta.extra["exporter_findings"]
    text = report(d, g, format="md")
    section = text.split("## Reported by the hosts' exporters", 1)[1].split("\n## ", 1)[0]
    assert "not judged again" in section
    for f in diagnose(source).findings:
        assert f"| h1 | `{f.pattern}` | {f.priority} | 2026-12-03T09:00:00Z | 2026-12-03T09:00:10Z | 11 s |" in section
    assert "## Reported by the hosts' exporters" not in report(diagnose(source), source, format="md")


def test_patterns_judge_the_read_back(read_back):
    _, g = read_back
    d = diagnose(g)
    idle = d.finding("compute.accelerator_idle")  # the process -> device edge joins the GPU's utilisation
    assert idle is not None and idle.subjects == [f"gpu:h1:{IDLE_GPU}"]
    mismatch = d.finding("interconnect.device_numa_mismatch")  # runs on node 0, its GPU on node 1
    assert mismatch is not None and "process:h1:10" in mismatch.subjects
    cross = d.finding("interconnect.cross_numa_access")
    assert cross is not None and cross.subjects == ["process:h1:10"]
    assert d.status("control.scheduling_latency") == "clear"
    stall = d.finding("storage.checkpoint_stall")  # 42 s writing: above its critical level (30 s)
    assert stall is not None and stall.subjects == ["process:h1:10"]
    assert d.status("control.thread_oversubscription") == "clear"  # 3 runnable threads on 8 CPUs


def test_no_exporter_series_says_how_to_get_them():
    g = Graph(Meta(hosts=["h1", "h2"], source="prometheus"))
    status = add_witty(g, [], 15.0, ["h1", "h2"])
    assert status.status == "unavailable" and "witty-profiler export" in status.reason
    text = exposition(exported_graph(), None)
    status = add_witty(g, exposition_rows(text, "h1"), 15.0, ["h1", "h2"])
    assert status.status == "partial" and "no witty_* series on 1 of 2 hosts (h2)" in status.reason


# -- with real engines -----------------------------------------------------------------------
# one thread spins, one sleeps: a serial bottleneck compute.hot_thread names
BUSY = ("import threading, time\nthreading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n"
        "while True:\n    pass\n")


@pytest.fixture(scope="module")
def busy():
    proc = subprocess.Popen([sys.executable, "-c", BUSY])
    yield proc
    proc.kill()
    proc.wait(10)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, busy):
    """Host 1 runs `export --listen`, scraped as its own job; host 2's node_exporter serves one window that
    `export --textfile` wrote into its textfile directory; host 3 runs no exporter."""
    root = tmp_path_factory.mktemp("prometheus-witty")
    textfiles = root / "textfile"
    textfiles.mkdir()
    written = subprocess.run([sys.executable, "-m", "witty_profiler", "export", "--textfile",
                              str(textfiles / "witty.prom"), "--duration", "2", "--pid", str(busy.pid), "-q"],
                             capture_output=True, text=True, timeout=120)
    assert written.returncode == 0, written.stderr
    exporter = [sys.executable, "-m", "witty_profiler", "export", "--listen", "10.213.1.2:9818", "--listen-public",
                "--interval", "1", "--pid", str(busy.pid), "-q"]
    env = {**os.environ, "WITTY_HOST": "exporter-h1"}
    with running_stack(root, 14, prefix="wpw", commands=(Command("witty", 1, 9818, exporter, env),),
                       node_args={2: [f"--collector.textfile.directory={textfiles}"]}) as s:
        yield s


@pytest.mark.live
@pytest.mark.slow
def test_busy_process_comes_back_from_prometheus(stack, busy, tmp_path):
    end = float(int(time.time()) - 2)
    w = collect_window(stack.url, end - 10, end, step=1.0, match='{job="node"}')
    g = w.graph
    host = stack.hosts[0]
    assert g.meta.collectors["prometheus.process"].status == "partial"  # host 3 runs no exporter
    assert f"no witty_* series on 1 of 3 hosts ({stack.hosts[2]})" in g.meta.collectors["prometheus.process"].reason
    p = g.entity(f"process:{host}:{busy.pid}")
    assert p is not None, sorted(e.id for e in g.entities("process"))[:20]
    assert p.attrs["name"] == "python3" or p.attrs["name"].startswith("python")
    # the values are Prometheus's own samples of the exporter's series, x 100, averaged over the window
    query = f'witty_process_cpu_utilisation_ratio{{job="witty", pid="{busy.pid}"}}'  # host 1's, not the textfile's
    held = stack.api("query_range", query=query, start=f"{end - 10:.3f}", end=f"{end:.3f}", step="1")["result"]
    samples = [float(v) * 100 for _, v in held[0]["values"]]
    assert p.metrics["cpu_util_pct"] == pytest.approx(sum(samples) / len(samples), abs=0.01)
    assert p.metrics["cpu_util_pct_max"] == pytest.approx(max(samples), abs=0.01)
    assert p.metrics["cpu_util_pct"] > 20  # it spins (the machine may be shared: not a full core)
    threads = [t for t in g.entities("thread") if t.id.startswith(f"thread:{host}:{busy.pid}:")]
    assert len(threads) == 2  # the spinning main thread and the sleeping one
    spinning = g.entity(f"thread:{host}:{busy.pid}:{busy.pid}").metrics["cpu_util_pct"]
    sleeping = [t for t in threads if t.id.rsplit(":", 1)[1] != str(busy.pid)]
    assert spinning > 20 and sleeping[0].metrics["cpu_util_pct"] < 5
    runs = [e for e in g.edges("runs_on") if e.source == p.id]
    assert runs and sum(e.metrics["runtime_share_pct"] for e in runs) == pytest.approx(100, abs=1)
    assert g.meta.host_info[host]["exporter_window_s"] == pytest.approx(1.0, abs=0.5)
    assert not [e for e in g.entities("process") if e.id.split(":")[1] == stack.hosts[2]]
    # host 2: the same process, from the textfile node_exporter served (its window, constant over ours)
    through_node = g.entity(f"process:{stack.hosts[1]}:{busy.pid}")
    assert through_node is not None and through_node.metrics["cpu_util_pct"] > 20
    assert through_node.metrics["cpu_util_pct"] == through_node.metrics["cpu_util_pct_max"]
    assert [e.target for e in g.edges("runs_on") if e.source == through_node.id] == [f"numa_node:{stack.hosts[1]}:0"]
    # the diagnosis judges it: a thread keeping a core busy while its sibling sleeps is a hot thread, where
    # it got more than 90 % of a core (on a shared machine it may not have)
    # The pid is in scope on both hosts that report it (host 1 averaged over our window, host 2 as the
    # textfile's one window): the busiest of the two main threads decides
    d = diagnose(g, pids=[busy.pid])
    hot = d.finding("compute.hot_thread")
    mains = {f"thread:{h}:{busy.pid}:{busy.pid}" for h in stack.hosts[:2]}
    busiest = max(g.entity(t).metrics["cpu_util_pct"] for t in mains if g.entity(t) is not None)
    if busiest > 90:
        assert hot is not None and set(hot.subjects) & mains, (hot, busiest)
    else:
        assert d.status("compute.hot_thread") == "clear", (hot, busiest)
    assert d.status("interconnect.cross_numa_access") in ("clear", "finding")
    assert d.status("control.scheduling_latency") in ("clear", "finding")
    out = tmp_path / "past.json"
    cli = [sys.executable, "-m", "witty_profiler"]
    done = subprocess.run([*cli, "collect", "--prometheus", stack.url, "--start", f"{end - 10:.0f}", "--end",
                           f"{end:.0f}", "--step", "1", "--match", '{job="node"}', "-o", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    saved = json.loads(Path(out).read_text())
    assert any(e["id"] == f"process:{host}:{busy.pid}" for e in saved["entities"])


def test_coverage_says_what_prometheus_does_not_hold(read_back):
    from witty_profiler.sources.promcoverage import not_held
    from witty_profiler.sources.promib import add_ports
    _, g = read_back
    g.meta.collectors.update({**not_held(), "prometheus.rdma": add_ports(Graph(Meta()), [])})
    d = diagnose(g, pids=[10])
    reasons = {c.pattern: c.reason or "" for c in d.coverage if c.status == "not_evaluated"}
    assert "prometheus.ebpf: unavailable (futex (lock) wait times" in reasons["control.lock_contention"]
    assert "prometheus.pmu_perf" in reasons["compute.low_ipc"] and "node_perf_" in reasons["compute.low_ipc"]
    assert "prometheus.ipc" in reasons["dataplane.ipc_backlog"]
    assert "prometheus.cgroup" in reasons["control.cpu_throttling"]
    assert "prometheus.pci" in reasons["interconnect.pcie_link_degraded"]
    assert "prometheus.nvlink" in reasons["interconnect.nvlink_contention"]
    assert "prometheus.socket" in reasons["network.congestion"]
    assert "prometheus.rdma: unavailable (no node_infiniband_* series" in reasons["network.rdma_bottleneck"]
