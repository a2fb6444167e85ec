"""The cluster summary at 1,000 hosts: under 500 tokens (not yet with 20 hosts without a graph), the
worst hosts first, the straggler and the odd host named. Digests come from the real code path (host_digests on a small graph per host; the hosts
with findings of their own through host_digest on a file, as a worker makes them) without a pool.
Speed is measured in benchmarks/cluster_scale.py, not here."""

from __future__ import annotations

from typing import Any

import pytest
from cluster_graphs import cluster, nic, rank

from witty_profiler.converters.tokens import count_tokens, fewer_than
from witty_profiler.diagnosis.cluster import _assemble, host_digest
from witty_profiler.diagnosis.cluster_report import SUMMARY_TOKENS, report, summary
from witty_profiler.diagnosis.digest import host_digests
from witty_profiler.topology import Graph, dump_graph

HOSTS, FAILED = 1000, 20  # hosts in all, of which FAILED gave no graph
STRAGGLER, ODD = "gpu-node-0370", "gpu-node-0730"
WORST = ["gpu-node-0555", "gpu-node-0123", "gpu-node-0124"]  # P0 x2, then P0 x1 twice (by name)
DIRECTORY = "/scratch/cluster/job-4242"


def name(i: int) -> str:
    return f"gpu-node-{i:04d}"


def host_graph(i: int, cpu: float, wait: float, speed: float = 100000.0, gpu_util: float | None = None,
               throttled: float | None = None) -> Graph:
    """One host of the job: its rank of job:slurm:42, a NIC; a GPU and a cgroup for hosts with findings."""
    h = name(i)
    g = cluster([h])
    r = rank(g, h, 4000 + i, i, world=HOSTS, cpu_util_pct=cpu, runqueue_wait_pct=wait)
    nic(g, h, speed_mbps=speed)
    if gpu_util is not None:
        gpu = g.entity_of("gpu", f"gpu:{h}:0000:18:00.0", {"index": 0, "pci_address": "0000:18:00.0"},
                          {"util_pct": gpu_util}).id
        g.edge_of("uses_device", r, gpu)
    if throttled is not None:
        cg = g.entity_of("cgroup", f"cgroup:{h}:v2:/slurm/job4242", {"path": "/slurm/job4242"},
                         {"throttled_periods_pct": throttled}).id
        g.edge_of("in_cgroup", r, cg)
    return g


def quiet_digest(graph: Graph) -> dict[str, Any]:
    """What host_digest gives for a host without findings, without the file round trip."""
    (d,) = host_digests(graph)
    return {**d, "file": f"{DIRECTORY}/{d['host']}.json", "counts": {"P0": 0, "P1": 0, "P2": 0}, "findings": []}


@pytest.fixture(scope="module")
def thousand(tmp_path_factory) -> tuple[Any, list[str]]:
    """The cluster diagnosis of 1,000 hosts and its hosts with findings, worst first (built once: 0.3 s)."""
    return build(tmp_path_factory.mktemp("hosts"))


def build(tmp_path) -> tuple[Any, list[str]]:
    with_findings = {555: {"gpu_util": 2.0, "throttled": 60.0}, 123: {"gpu_util": 2.0}, 124: {"throttled": 60.0}}
    with_findings.update({i: {"throttled": 20.0} for i in range(200, 200 + 46)})  # P2 each
    digests = []
    for i in range(HOSTS - FAILED):
        cpu, wait = 95.0 + i % 5, 1.0 + (i % 3) / 2  # ranks of one job work alike, within a few points
        if name(i) == STRAGGLER:
            cpu, wait = 48.0, 45.0  # control.scheduling_latency (P1) on that host too
        graph = host_graph(i, cpu, wait, speed=25000.0 if name(i) == ODD else 100000.0, **with_findings.get(i, {}))
        if i in with_findings or name(i) == STRAGGLER:
            path = tmp_path / f"{name(i)}.json"
            dump_graph(graph, path)
            digests.append(host_digest(str(path)))
        else:
            digests.append([quiet_digest(graph)])
    failed = [{"host": name(k), "reason": f"failed: srun: error: {name(k)}: task {k - HOSTS + FAILED}: Exited with "
                                          "exit code 1"} for k in range(HOSTS - FAILED, HOSTS)]  # as the manifest says
    d = _assemble(iter(digests), failed, None)
    return d, [h["host"] for h in d.worst_first() if any(h["counts"].values())]


def test_quiet_digest_is_what_host_digest_gives(tmp_path):
    graph = host_graph(7, 97.0, 1.0)
    dump_graph(graph, tmp_path / "gpu-node-0007.json")
    (real,) = host_digest(str(tmp_path / "gpu-node-0007.json"))
    assert {**real, "file": ""} == {**quiet_digest(graph), "file": ""}


@pytest.mark.slow
def test_summary_of_a_thousand_hosts_stays_small_and_names_the_worst_first(thousand):
    d, worst = thousand
    assert len(d.hosts) == HOSTS - FAILED and len(d.failed) == FAILED
    assert len(worst) == 50
    assert worst[:4] == WORST + [STRAGGLER]
    assert [f.pattern for f in d.cross.findings] == ["control.straggler_host", "network.odd_host"]

    text = summary(d, DIRECTORY)
    assert text.startswith(f"# Cluster: {HOSTS - FAILED} hosts diagnosed, {FAILED} without a graph")
    across = text.split("## Across hosts")[1].split("## Hosts, worst first")[0]
    assert STRAGGLER in across.split("control.straggler_host")[1].split("\n")[0]
    assert ODD in across.split("network.odd_host")[1].split("\n")[0]
    table = text.split("## Hosts, worst first")[1].split("##")[0]
    rows = [line.split(" | ")[0] for line in table.splitlines() if line.startswith("gpu-node-")]
    assert len(rows) >= 3 and rows == worst[:len(rows)]  # the worst first, as many as the budget lets
    assert f"… {50 - len(rows)} more hosts with findings, {HOSTS - FAILED - 50} without" in table
    assert f"`witty-profiler cluster diagnose {DIRECTORY} --host NAME`" in table
    gone = text.split("## Without a graph: ")[1]
    named = [f["host"] for f in d.failed if f"{f['host']}: failed: srun: error:" in gone]
    assert named and named == [f["host"] for f in d.failed][:len(named)]
    assert f"(+{FAILED - len(named)} more)" in gone


@pytest.mark.slow
def test_summary_of_a_thousand_hosts_with_hosts_without_a_graph_stays_under_500_tokens(thousand):
    d, _ = thousand
    roomy = summary(d, DIRECTORY)
    assert count_tokens(roomy) >= SUMMARY_TOKENS  # the roomiest layout does not fit: the bound must bite
    text = summary(d, DIRECTORY, fits=fewer_than(SUMMARY_TOKENS))
    tokens = count_tokens(text)
    assert tokens < SUMMARY_TOKENS, f"{tokens} tokens:\n{text}"
    assert STRAGGLER in text and ODD in text and "without a graph" in text


@pytest.mark.slow
def test_the_report_lists_every_host_the_summary_leaves_out(thousand):
    d, _ = thousand
    text = report(d, DIRECTORY)
    assert text.startswith(summary(d, DIRECTORY))
    every = text.split("## Every host without a graph")[1]
    assert all(f"- {f['host']}: {f['reason']}" in every for f in d.failed)


def test_leave_one_out_medians_are_those_of_the_peers():
    """The cross-host statistics take each rank's peers' median and MAD from one sort of the job's values
    (8,000 ranks of one job would be 8,000 sorts): the very numbers statistics.median gives the peers."""
    import random
    from statistics import median

    from witty_profiler.diagnosis.crosshost import _LeaveOneOut, _PeerStatistics
    rnd = random.Random(5)
    for _ in range(300):
        pool = rnd.choice([[0, 1, 2, 2, 5, 100], [0, 0.0, 1, 1.0, 3, 3.0, 97.5], None])
        values = [rnd.choice(pool) if pool else rnd.uniform(0, 100) for _ in range(rnd.randint(2, 12))]
        stats, loo = _PeerStatistics(values), _LeaveOneOut(values)
        for i in range(len(values)):
            peers = values[:i] + values[i + 1:]
            centre = median(peers)
            assert repr(loo.median(i)) == repr(stats.median(i)) == repr(centre)
            assert repr(stats.mad(i, centre)) == repr(median(abs(v - centre) for v in peers))
