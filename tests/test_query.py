"""One query layer: the diagnosis and the views read a graph's facts from topology.query, so a table row
never shows a different fact from the finding that cites it, and the views judge nothing of their own."""

from __future__ import annotations

import json
import re

import witty_profiler as wp
from witty_profiler.cli import main
from witty_profiler.topology import dump_graph
from witty_profiler.topology.ids import numa_id
from witty_profiler.topology.query import GraphQuery
from witty_profiler.topology.workload import resolve_workload

from diagnosis_graphs import H, allocates_on, device, new_graph, numa, process, runs_on, thread, two_numa_host, uses


def _row(text: str, table: str, row_id: str) -> dict[str, str]:
    """The cells of one row of a view's table, by column (columns are split on runs of 2+ spaces)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(table))
    header = re.split(r"\s{2,}", lines[start + 1].strip())
    for line in lines[start + 2:]:
        if line.startswith(row_id + " "):
            return dict(zip(header, re.split(r"\s{2,}", line.strip())))
    raise AssertionError(f"no row {row_id} in table {table!r}:\n{text}")


def _gpu_with_two_nodes():
    """A GPU whose numa_node attribute says 0 while its local_to edge says 1 (a hand-edited or merged
    graph): its user runs and allocates on node 0."""
    g = new_graph(collectors={"process": "ok", "numa": "ok", "gpu": "ok"})
    two_numa_host(g)
    gpu = g.entity_of("gpu", f"gpu:{H}:0000:3b:00.0", {"index": 0, "numa_node": 0}, {"util_pct": 90.0}).id
    g.edge_of("local_to", gpu, numa_id(H, 1))
    pid = process(g, 10, cpu_util_pct=95.0, attrs={"cpus_allowed": "0-3"})
    thread(g, 10, 10)
    runs_on(g, 10, 10, 0, 9e9)
    allocates_on(g, 10, 0, 100_000)
    uses(g, 10, gpu)
    return g, gpu, pid


def test_a_device_has_one_numa_node_for_the_finding_and_the_tables():
    g, gpu, pid = _gpu_with_two_nodes()
    q = GraphQuery.of(g)
    assert q.device_node(g.entity(gpu)) == (1, f"local_to|{gpu}|{numa_id(H, 1)}")
    diagnosis = wp.diagnose(g)
    mismatch = diagnosis.finding("interconnect.device_numa_mismatch")
    assert mismatch is not None
    cited = [ev for ev in mismatch.evidence if ev.metric == "numa_node"]
    assert [ev.value for ev in cited] == [1]
    view = wp.convert(g, "interconnect", diagnosis=diagnosis).text
    assert _row(view, "workload placement", pid)["dev_node"] == "1"
    assert _row(view, "devices and their NUMA node", gpu)["node"] == "1"
    assert "node 1: 1" in wp.convert(g, "summary", diagnosis=diagnosis).text


def test_the_placement_row_shows_the_pages_the_finding_judged():
    """Pages known only from allocates_on edges: the row's flag and pages agree with the finding."""
    g = new_graph(collectors={"process": "ok", "numa": "ok", "gpu": "ok"})
    two_numa_host(g)
    gpu = device(g, "gpu", "0000:3b:00.0", 0, numa_node=0)
    pid = process(g, 10, attrs={"cpus_allowed": "0-3"})
    allocates_on(g, 10, 1, 8_000)
    allocates_on(g, 10, 0, 2_000)
    uses(g, 10, gpu)
    diagnosis = wp.diagnose(g)
    assert diagnosis.finding("interconnect.device_numa_mismatch") is not None
    row = _row(wp.convert(g, "interconnect", diagnosis=diagnosis).text, "workload placement", pid)
    assert row["placement"] == "OFF-NODE:pages" and row["pages_by_node"] == "1:8000 0:2000"
    assert row["remote_pages_pct"] == "80%"


def test_allowed_nodes_include_the_threads_own_masks():
    g = new_graph(collectors={"process": "ok", "numa": "ok"})
    two_numa_host(g)
    pid = process(g, 10, attrs={"cpus_allowed": "0-3"})
    thread(g, 10, 11, attrs={"cpus_allowed": "4-5"})
    placement = GraphQuery.of(g).placement(g.entity(pid))
    assert placement.allowed_cpus == {0, 1, 2, 3, 4, 5} and placement.allowed_nodes == [0, 1]


def test_allowed_nodes_fall_back_to_allowed_on_edges():
    g = new_graph()
    two_numa_host(g)
    pid = process(g, 10)
    tid = thread(g, 10, 11)
    g.edge_of("allowed_on", tid, numa_id(H, 1))
    assert GraphQuery.of(g).placement(g.entity(pid)).allowed_nodes == [1]


def test_the_query_layer_follows_the_graph():
    g = new_graph()
    numa(g, 0, "0-1")
    q = GraphQuery.of(g)
    assert GraphQuery.of(g) is q and q.node_of_cpu(H, 1) == 0
    numa(g, 1, "2-3")
    assert GraphQuery.of(g) is not q and GraphQuery.of(g).node_of_cpu(H, 2) == 1


def test_the_views_show_the_workload_the_diagnosis_judged(tmp_path):
    """convert --pid names the same workload as diagnose --pid: its processes lead the tables."""
    g = new_graph()
    two_numa_host(g)
    process(g, 10, name="trainer", cpu_util_pct=5.0)
    process(g, 20, name="helper", ai=False, role=None, cpu_util_pct=50.0)
    process(g, 21, name="child", ppid=20, ai=False, role=None, cpu_util_pct=1.0)
    path = tmp_path / "g.json"
    dump_graph(g, path)
    assert resolve_workload(GraphQuery.of(g), [20]).ids == {f"process:{H}:20", f"process:{H}:21"}
    summary = wp.convert(g, "summary", pids=[20]).text
    assert "workload: pid 20 and descendants (2 processes)" in summary
    assert f"process:{H}:10" not in summary
    out = tmp_path / "view.txt"
    assert main(["convert", str(path), "--pid", "20", "-o", str(out)]) == 0
    assert out.read_text() == wp.convert(g, "summary", pids=[20], ref=str(path)).text
    assert main(["convert", str(path), "--pid", "99"]) == 2


def test_convert_shows_the_findings_of_the_thresholds_given(tmp_path, capsys):
    """The summary lists the findings of the thresholds in force, not of the defaults."""
    g = new_graph(collectors={"process": "ok", "cpu": "ok"})
    g.entity_of("host", f"host:{H}", {"name": H}, {"cpu_util_pct": 85.0})
    path, table = tmp_path / "g.json", tmp_path / "t.toml"
    dump_graph(g, path)
    table.write_text('["compute.cpu_saturation"]\ncpu_util_pct = {warning = 80, critical = 95}\n')
    assert main(["convert", str(path)]) == 0
    assert "unhealthy layers (diagnosis): none" in capsys.readouterr().out
    assert main(["convert", str(path), "--thresholds", str(table)]) == 0
    assert "compute: P1 1 finding: cpu_saturation" in capsys.readouterr().out


def test_a_view_without_a_diagnosis_judges_nothing():
    """The converters alone show the facts and say that nothing was judged: no threshold of their own."""
    from witty_profiler.converters import render_view
    g = new_graph(collectors={"process": "ok", "cpu": "ok"})
    g.entity_of("host", f"host:{H}", {"name": H}, {"cpu_util_pct": 99.0})
    text = render_view(g, "summary").text
    assert "unhealthy layers: not judged (no diagnosis was given to the view)" in text
    assert "compute" not in text.split("unhealthy layers")[1].split("\n")[0]
    assert json.loads(json.dumps(wp.convert(g, "summary").to_dict()))["text"] != text
