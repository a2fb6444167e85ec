"""The catalog against DESIGN.md's public table, coverage of every pattern, determinism, and the
real legacy sample."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from witty_profiler.diagnosis import LAYERS, diagnose
from witty_profiler.diagnosis import evidence as ev
from witty_profiler.diagnosis.catalog import catalog
from witty_profiler.diagnosis.report import report
from witty_profiler.topology import Graph, dumps_graph, load_graph, loads_graph
from witty_profiler.topology.vocabulary import metric_info

from converter_graphs import hand_graph
from diagnosis_graphs import allocates_on, device, host, new_graph, process, runs_on, thread, two_numa_host, uses

DESIGN = Path(__file__).resolve().parents[1].parent / "shared" / "DESIGN.md"
WORKERS = (1895087, 1895088, 1895089, 1895090)


def test_catalog_has_every_id_of_the_design_table():
    if not DESIGN.exists():
        pytest.skip("../shared/DESIGN.md is absent")
    ids = set(re.findall(r"^\| ([a-z]+\.[a-z_]+) \| (\d) \|", DESIGN.read_text(), re.M))
    assert ids, "the table was not found"
    assert {(p.id, str(p.layer)) for p in catalog().values()} >= ids


def test_every_pattern_is_complete_and_reads_known_metrics():
    for p in catalog().values():
        assert p.title and p.why and p.evidence and len(p.recommendations) >= 2, p.id
        assert p.layer_name == LAYERS[p.layer - 1][1]
        for t in p.thresholds:
            assert t.levels(), f"{p.id}.{t.name} has no level"
        for read in p.metrics:
            owner, _, name = read.rpartition(".")
            if owner and name.endswith(("_pct", "_per_s", "_us", "_bytes", "_total", "_mhz", "_c", "_w", "_p95")):
                assert metric_info(name), f"{p.id} reads {name}, which topology/vocabulary.py does not define"


def test_every_pattern_ends_in_coverage_once_on_an_empty_graph():
    d = diagnose(Graph())
    assert [c.pattern for c in d.coverage] == list(catalog())
    assert all(c.status == "not_evaluated" and c.reason for c in d.coverage)
    assert d.findings == [] and d.summary["counts"] == {"P0": 0, "P1": 0, "P2": 0}


def _busy_graph() -> Graph:
    g = new_graph()
    host(g, cpu_util_pct=97.123456789, psi_cpu_some_pct=12.5)
    two_numa_host(g)
    process(g, 10, "train", cpu_util_pct=5.0, attrs={"cpus_allowed": "4-7"})
    gpu = device(g, "gpu", "0000:3b:00.0", 0, numa_node=0, util_pct=10.0)
    uses(g, 10, gpu)
    thread(g, 10, 10, cpu_util_pct=5.0)
    runs_on(g, 10, 10, 1, 5e9)
    allocates_on(g, 10, 1, 100000)
    return g


def test_sentences_agree_in_number_and_write_rates_as_rates():
    assert [ev.counted(n, "NUMA nodes") for n in (0, 1, 2)] == ["0 NUMA nodes", "1 NUMA node", "2 NUMA nodes"]
    assert ev.counted(1, "multi-threaded workload processes") == "1 multi-threaded workload process"
    assert ev.counted(1, "IPC queues", "keep") == "1 IPC queue keeps"
    assert ev.counted(1, "accelerator users", "are") == "1 accelerator user is"
    assert ev.counted(3, "accelerator users", "are") == "3 accelerator users are"
    assert ev.counted(1, "loader/producer workers") == "1 loader/producer worker"
    assert ev.counted(1, "process/device pairs") == "1 process/device pair"
    assert ev.counted(1, "consumers with cpu_util_pct samples") == "1 consumer with cpu_util_pct samples"
    assert ev.counted(1, "memory domains (hosts, NUMA nodes)") == "1 memory domain (hosts, NUMA nodes)"
    assert f"{ev.Count(1):disks|are} busy, {ev.Count(2):disks|are} busy, {ev.Count(1)}" == "1 disk is busy, 2 disks are busy, 1"
    assert ev.listed("node", [7]) + "; " + ev.listed("node", [0, 5]) + "; " + ev.listed("node", []) == \
        "node 7; nodes 0, 5; node unknown"
    assert ev.counted(1, "NICs") + ", " + ev.counted(1, "batches") + ", " + ev.counted(1, "policies") == \
        "1 NIC, 1 batch, 1 policy"
    assert [ev.fmt(v, u) for v, u in ((0.0, "1/s"), (685.2, "1/s"), (12.5, "%"), (3.0, "ms"), (0.5, "ratio"))] == \
        ["0/s", "685.2/s", "12.5 %", "3 ms", "0.5"]


def test_every_sentence_agrees_with_its_count():
    """No "1 NUMA nodes measured" nor "1 accelerator(s) are" in any finding or coverage line."""
    graphs = (_busy_graph(), _odd_graph(), hand_graph())
    texts = [t for g in graphs for d in (diagnose(g), diagnose(g, pids=[10]) if g.entity("process:h1:10") else diagnose(g))
             for t in [f.description for f in d.findings] + [c.reason for c in d.coverage]]
    assert any(re.search(r"\b1 \w", t) for t in texts)  # the check below has something to check
    for text in texts:
        assert not re.search(r"\b1 [\w/-]+ ?\w*[^s]s (measured|checked|traced|compared|are|spend|wait|keep)\b", text), text
        assert "(s)" not in text and " 1/s" not in text, text


def test_same_graph_same_bytes_also_after_a_json_round_trip():
    g = _busy_graph()
    first = diagnose(g).to_json()
    assert diagnose(g).to_json() == first
    again = loads_graph(dumps_graph(g))
    assert diagnose(again).to_json() == first
    assert report(diagnose(again), again) == report(diagnose(g), g)
    assert "97.123" in first and "97.1234" not in first  # floats rounded in the output


def test_findings_sorted_by_priority_then_layer():
    d = diagnose(_busy_graph())
    keys = [({"P0": 0, "P1": 1, "P2": 2}[f.priority], f.layer, f.pattern) for f in d.findings]
    assert keys == sorted(keys) and len(keys) >= 2


def test_layer_filter_keeps_only_that_layer():
    d = diagnose(_busy_graph(), layer="interconnect")
    assert {c.layer for c in d.coverage} == {3}
    assert [f.pattern for f in d.findings] == ["interconnect.device_numa_mismatch"]
    assert diagnose(_busy_graph(), layer=3).to_json() == d.to_json()


def test_unknown_pid_and_layer_are_input_errors():
    from witty_profiler.topology.errors import InputError
    with pytest.raises(InputError, match="pid 4242 is not in this graph"):
        diagnose(_busy_graph(), pids=[4242])
    with pytest.raises(InputError, match="unknown layer"):
        diagnose(_busy_graph(), layer="gpu")


def test_pid_scope_includes_descendants_only():
    g = _busy_graph()
    process(g, 11, "worker", ppid=10, cpu_util_pct=1.0)
    process(g, 99, "other", ai=False, role=None, cpu_util_pct=1.0)
    d = diagnose(g, pids=[10])
    assert d.summary["scope"] == {"mode": "pids", "description": "pid 10 and descendants (2 processes)",
                                  "pids": [10], "processes": 2}


def _odd_graph() -> Graph:
    """Attributes of the wrong type or shape, as a hand-edited or foreign file may have them."""
    g = _busy_graph()
    g.entity("process:h1:10").attrs.update(cpus_allowed="garbage", numa_pages={"x": "y", "1": True, "0": 5})
    g.entity("numa_node:h1:0").attrs.update(node="zero", distances="far", cpus=[0, "a"])
    g.entity("thread:h1:10:10").attrs["numa_runtime_ns"] = {"n": 1, "1": "2"}
    g.entity_of("gpu", "gpu:h1:odd", {"numa_node": True, "index": None}, {"util_pct": None})
    g.edge_of("uses_device", "process:h1:10", "gpu:h1:odd")
    g.edge_of("pipe", "process:h1:10", "process:h1:404")  # a dangling end
    g.entity_of("tcp_connection", "tcp_connection:h1:x", {"remote": 42, "local": None}, {"rtt_us": 500.0})
    g.entity_of("cgroup", "cgroup:h1", {}, {"throttled_periods_pct": 80.0})
    return g


def test_no_internal_errors_on_test_graphs():
    for g, scopes in ((Graph(), [None]), (_busy_graph(), [None, [10]]), (_odd_graph(), [None, [10]])):
        for pids in scopes:
            assert not [c for c in diagnose(g, pids=pids).coverage if "internal error" in c.reason]


# -- the real legacy sample -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def sample(vllm_sample_path):
    graph = load_graph(vllm_sample_path)
    return graph, diagnose(graph)


def test_sample_device_numa_mismatch_for_each_vllm_worker(sample):
    graph, d = sample
    f = d.finding("interconnect.device_numa_mismatch")
    assert f is not None and f.priority == "P0" and f.layer == 3
    host_name = graph.meta.hosts[0]
    expected_node = {1895087: 6, 1895088: 6, 1895089: 4, 1895090: 4}
    for pid in WORKERS:
        pid_id = f"process:{host_name}:{pid}"
        assert pid_id in f.subjects
        mine = [e for e in f.evidence if any(pid_id in i or f"thread:{host_name}:{pid}:" in i for i in e.ids)]
        metrics = {e.metric: e for e in mine}
        # the device and its NUMA node
        use = next(e for e in mine if e.metric == "uses_device")
        device_id = use.ids[0].split("|")[2]
        node_ev = next(e for e in f.evidence if e.metric == "numa_node" and device_id in e.ids[0])
        assert node_ev.value == expected_node[pid]
        # where it may run, how its run time and pages are spread
        assert metrics["cpus_allowed"].value and "NUMA node" in metrics["cpus_allowed"].note
        assert metrics["remote_runtime_pct"].value > 50
        pages = next(e for e in f.evidence if e.metric == "remote_pages_pct" and
                     any(f"process:{host_name}:{pid}|" in i for i in e.ids))
        assert "pages by NUMA node" in pages.note
    # the NUMA distances from where they run to the device
    distances = [e for e in f.evidence if e.metric == "numa_distance"]
    assert distances and all(e.value >= 10 for e in distances)
    assert {e.value for e in distances} >= {11.0, 24.0, 25.0}


def test_sample_worker_1895087_is_allowed_on_node_7_only(sample):
    graph, d = sample
    f = d.finding("interconnect.device_numa_mismatch")
    ev = next(e for e in f.evidence if e.metric == "cpus_allowed" and e.ids == [f"process:{graph.meta.hosts[0]}:1895087"])
    assert ev.value == "168-191" and "NUMA node 7;" in ev.note


def test_sample_patterns_without_data_are_not_evaluated_with_reasons(sample):
    _, d = sample
    for pid in ("compute.cpu_saturation", "compute.accelerator_idle", "memory.pressure", "control.cpu_throttling",
                "control.scheduling_latency", "storage.io_wait", "network.retransmission", "compute.low_ipc"):
        row = next(c for c in d.coverage if c.pattern == pid)
        assert row.status == "not_evaluated", (pid, row.reason)
        assert "legacy" in row.reason, (pid, row.reason)


def test_sample_report_names_the_workers_and_devices(sample):
    graph, d = sample
    md = report(d, graph)
    for pid in WORKERS:
        assert f"pid {pid}" in md
    for n in range(4):
        assert f"NPU{n}" in md
    assert "## Layer 3: Interconnect" in md and "not evaluated" in md
    data = json.loads(report(d, graph, "json"))
    assert set(data) == {"findings", "coverage", "summary"}
