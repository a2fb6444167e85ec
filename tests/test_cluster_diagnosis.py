"""Several hosts: merging host graphs, one host's part, host digests, the cross-host rules, and the
diagnosis of a directory of host graphs (worker processes, failures, duplicates)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from witty_profiler.diagnosis import diagnose
from witty_profiler.diagnosis.cluster import diagnose_cluster
from witty_profiler.diagnosis.cluster_report import report, summary
from witty_profiler.diagnosis.crosshost import odd_facts, windows_apart
from witty_profiler.diagnosis.digest import host_digests
from witty_profiler.topology import dump_graph, load_graph
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.hosts import host_part, host_windows, merge_hosts

from cluster_graphs import cluster, nic, nic_speeds, rank, ranks_on_hosts
from diagnosis_graphs import new_graph, process


def _host_graph(host: str, started: str = "2026-12-02T09:00:00Z", cpu: float = 95.0, rank_no: int = 0):
    g = cluster([host])
    g.meta.started_at = started
    rank(g, host, 100, rank_no, cpu_util_pct=cpu)
    nic(g, host)
    return g


# -- merge and drill-down ----------------------------------------------------------------------
def test_merge_keeps_each_hosts_window_and_refuses_a_host_twice():
    merged = merge_hosts([("a.json", _host_graph("a")), ("b.json", _host_graph("b", "2026-12-02T09:00:05Z"))])
    assert merged.meta.hosts == ["a", "b"]
    assert host_windows(merged) == {"a": {"started_at": "2026-12-02T09:00:00Z", "duration_s": 10.0},
                                    "b": {"started_at": "2026-12-02T09:00:05Z", "duration_s": 10.0}}
    assert merged.meta.duration_s == 15.0  # the merged window spans both
    # the job is one entity with the ranks of both hosts
    assert sorted(e.source for e in merged.edges("member_of")) == ["process:a:100", "process:b:100"]
    with pytest.raises(InputError, match="host a is in both a.json and again.json"):
        merge_hosts([("a.json", _host_graph("a")), ("again.json", _host_graph("a"))])


def test_host_part_is_one_host_with_its_jobs_and_collectors():
    merged = merge_hosts([(h, _host_graph(h)) for h in ("a", "b", "c")])
    part = host_part(merged, "b")
    assert part.meta.hosts == ["b"] and set(part.meta.collectors) == {"process"}
    assert {e.id for e in part.entities()} == {"host:b", "process:b:100", "nic:b:ib0", "job:slurm:42"}
    assert [e.source for e in part.edges("member_of")] == ["process:b:100"]
    with pytest.raises(InputError, match="no host 'z'"):
        host_part(merged, "z")


def test_windows_that_do_not_overlap_are_named():
    digests = [{"host": h, "window": {"started_at": s, "duration_s": 10.0}} for h, s in
               (("a", "2026-12-02T09:00:00Z"), ("b", "2026-12-02T09:00:03Z"), ("c", "2026-12-02T10:00:00Z"))]
    assert windows_apart(digests) == ["c (2026-12-02T10:00:00Z, 10 s)"]
    assert windows_apart(digests[:2]) == []


# -- digests -------------------------------------------------------------------------------------
def test_digest_holds_ranks_signals_and_facts():
    g = ranks_on_hosts([90.0, 91.0], runqueue_wait_pct=3.0)
    gpu = g.entity_of("gpu", "gpu:h0:0000:3b:00.0", {"index": 0}, {"util_pct": 97.0, "sm_clock_mhz": 1980.0,
                                                                     "throttle_thermal": 1.0})
    g.edge_of("uses_device", "process:h0:100", gpu.id)
    nic(g, "h0", rx_errors_per_s=2.0)
    by_host = {d["host"]: d for d in host_digests(g)}
    r = by_host["h0"]["ranks"][0]
    assert (r["rank"], r["job"], r["devices"]) == (0, "job:slurm:42", ["gpu:h0:0000:3b:00.0"])
    assert r["metrics"] == {"cpu_util_pct": 90.0, "runqueue_wait_pct": 3.0, "device_util_pct": 97.0,
                            "device_sm_clock_mhz": 1980.0, "device_throttled": 1}
    assert by_host["h0"]["facts"] == {"degraded pcie links": 0, "gpu count": 1, "nic ib0 errors_per_s": 2.0,
                                      "nic ib0 speed_mbps": 100000.0}
    assert by_host["h1"]["facts"] == {}
    assert json.loads(json.dumps(by_host["h0"])) == by_host["h0"]  # plain JSON: it crosses processes


# -- the cross-host rules -----------------------------------------------------------------------
def test_straggler_is_not_evaluated_on_one_host_and_clear_among_equals():
    d = diagnose(new_graph())
    assert d.status("control.straggler_host") == "not_evaluated"
    assert "1 host in the graph" in next(c.reason for c in d.coverage if c.pattern == "control.straggler_host")
    assert diagnose(ranks_on_hosts([95.0, 96.0, 94.0, 95.5])).status("control.straggler_host") == "clear"


def test_a_spread_out_job_has_no_straggler_and_one_outlier_among_many_is_found():
    # peers spread from 40 % to 100 %: the lowest is within their spread (robust z small)
    assert diagnose(ranks_on_hosts([40.0, 55.0, 70.0, 85.0, 100.0])).finding("control.straggler_host") is None
    f = diagnose(ranks_on_hosts([99.0] * 15 + [60.0])).finding("control.straggler_host")
    assert f.subjects == ["host:h15", "process:h15:115"] and f.severity == "warning"
    assert "15 peers' median 99 %" in f.evidence[0].note


def test_an_io_straggler_is_named_by_its_storage_signals():
    """The rank on h1 writes 478 MB/s and is blocked on I/O 40 % of the window, its peers write 75 KB/s: its CPU
    and run-queue look like theirs, so before the storage signals nothing set it apart."""
    g = cluster(["h0", "h1", "h2"])
    for i, h in enumerate(["h0", "h1", "h2"]):
        slow = h == "h1"
        pid = rank(g, h, 100, i, cpu_util_pct=97.0 + i, runqueue_wait_pct=2.0, io_blocked_pct=40.0 if slow else 0.5,
                   write_bytes_per_s=478e6 if slow else 75e3 + 1e3 * i, major_faults_per_s=0.0)
        conn = g.entity_of("tcp_connection", f"tcp_connection:{h}:10.0.0.{i}:40000:10.0.0.9:29500", {},
                           {"bytes_sent_total": 1e9 * (3 if slow else 1), "bytes_received_total": 0.0}).id
        g.edge_of("owns_connection", pid, conn)
    f = diagnose(g).finding("control.straggler_host")
    assert f is not None and f.severity == "critical" and f.subjects == ["host:h1", "process:h1:100"]
    signals = [e.metric for e in f.evidence]
    assert signals[:2] == ["write_bytes_per_s deviation from peers", "io_blocked_pct deviation from peers"]
    assert "net_bytes_per_s deviation from peers" in signals  # 300 MB/s of TCP against the peers' 100 MB/s
    assert "write_bytes_per_s 478 MB/s vs the peers' median 0.076 MB/s (robust z" in f.description
    assert "every step waits" not in f.description and "Where the job synchronises its ranks" in f.description
    assert any("writes far more than its peers" in r for r in f.recommendations)


def test_odd_host_on_two_hosts_does_not_send_the_user_to_cluster_diagnose():
    reason = next(c.reason for c in diagnose(ranks_on_hosts([90.0, 91.0])).coverage if c.pattern == "network.odd_host")
    assert reason.startswith("2 hosts: this pattern compares 3 or more") and "cluster diagnose" not in reason


def test_straggler_needs_ranks_of_one_job_on_two_hosts():
    g = cluster(["h0", "h1", "h2"])
    for i, h in enumerate(["h0", "h1", "h2"]):
        rank(g, h, 100, i, job=f"job:slurm:{i}", cpu_util_pct=100.0 - 40 * (i == 2))
    row = next(c for c in diagnose(g).coverage if c.pattern == "control.straggler_host")
    assert row.status == "not_evaluated" and "3 ranks found" in row.reason


def test_odd_host_rules():
    f = diagnose(nic_speeds([100000.0, 100000.0, 100000.0, 25000.0])).finding("network.odd_host")
    assert f.subjects == ["host:h3"] and f.evidence[0].metric == "nic ib0 speed_mbps"
    digests = [{"host": f"h{i}", "facts": {"nic ib0 speed_mbps": 100.0, "nic ib0 errors_per_s": 0.0},
                "collectors": {"process": "ok", "rdma": "ok"}} for i in range(4)]
    digests[1]["facts"]["nic ib0 errors_per_s"] = 3.5
    digests[2]["collectors"]["rdma"] = "unavailable"
    del digests[3]["facts"]["nic ib0 speed_mbps"]
    found = {(o["host"], o["what"], o["kind"]) for o in odd_facts(digests, 0.66, 3)}
    assert found == {("h1", "nic ib0 errors_per_s", "errors"), ("h2", "collector rdma", "collector"),
                     ("h3", "nic ib0 speed_mbps", "fact")}
    # no majority: nothing is odd
    assert odd_facts([{"host": h, "facts": {"x": v}} for h, v in (("a", 1), ("b", 2), ("c", 3))], 0.66, 3) == []


# -- a directory of host graphs -----------------------------------------------------------------
def _directory(tmp_path, cpus: list[float]) -> list:
    files = []
    for i, cpu in enumerate(cpus):
        path = tmp_path / f"n{i}.json"
        g = _host_graph(f"n{i}", cpu=cpu, rank_no=i)
        process(g, 7, "noise", ai=False, role=None)  # a process of the default test host: ignored here
        dump_graph(g, path)
        files.append(path)
    return files


@pytest.mark.slow
def test_cluster_diagnosis_in_worker_processes_names_the_straggler(tmp_path):
    files = _directory(tmp_path, [98.0, 97.0, 99.0, 96.0, 30.0])
    (tmp_path / "broken.json").write_text("{not json")
    dump_graph(_host_graph("n1"), tmp_path / "n1-again.json")
    result = diagnose_cluster([*files, tmp_path / "broken.json", tmp_path / "n1-again.json"],
                              failed=[{"host": "n9", "reason": "timeout: no graph after 70 s"}], workers=2)
    assert [h["host"] for h in result.hosts] == ["n0", "n1", "n2", "n3", "n4"]
    assert {f["host"] for f in result.failed} == {"broken", "n1", "n9"}
    straggler = result.cross.finding("control.straggler_host")
    assert straggler.subjects == ["host:n4", "process:n4:100"] and straggler.severity == "critical"
    text = summary(result, "graphs")
    assert text.startswith("# Cluster: 5 hosts diagnosed, 3 without a graph")
    assert "n9: timeout: no graph after 70 s" in text and "`control.straggler_host`" in text
    assert json.loads(report(result, format="json"))["findings"][0]["pattern"] == "control.straggler_host"
    # the same in one process
    assert diagnose_cluster(files, workers=1).cross.to_dict() == diagnose_cluster(files, workers=2).cross.to_dict()


@pytest.mark.slow
def test_cli_merge_cluster_diagnose_and_hosts(tmp_path):
    files = _directory(tmp_path, [98.0, 97.0, 35.0])
    py = [sys.executable, "-m", "witty_profiler"]
    merged = tmp_path / "out" / "merged.json"
    merged.parent.mkdir()
    done = subprocess.run([*py, "merge", *map(str, files), "-o", str(merged)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert load_graph(merged).meta.hosts == ["n0", "n1", "n2"]
    diag = subprocess.run([*py, "diagnose", str(merged), "--format", "json"], capture_output=True, text=True)
    assert json.loads(diag.stdout)["findings"][0]["pattern"] == "control.straggler_host"
    one = subprocess.run([*py, "cluster", "diagnose", str(tmp_path), "--host", "n2"], capture_output=True, text=True)
    assert one.returncode == 0 and "- Hosts: n2" in one.stdout
    hosts = subprocess.run([*py, "cluster", "hosts", str(tmp_path), "--json"], capture_output=True, text=True)
    assert [r["host"] for r in json.loads(hosts.stdout)] == ["n0", "n1", "n2"]
    missing = subprocess.run([*py, "cluster", "diagnose", str(tmp_path), "--host", "zz"], capture_output=True,
                             text=True)
    assert missing.returncode == 2 and "no graph of host 'zz'" in missing.stderr
