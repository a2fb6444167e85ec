"""msprof-analyze cluster outputs (the real 8-rank fixture) into the graph, and the slow-rank diagnosis on it."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from witty_profiler import diagnose
from witty_profiler.topology import Graph, load_graph
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.models import Meta
from witty_profiler.traces.importer import import_traces, join_processes
from witty_profiler.traces.common import group_name, op_name

from conftest import SHARED

MSPROF = SHARED / "traces" / "msprof"
STEP_CSV = MSPROF / "cluster_step_trace_time.csv"
COMM_JSON = MSPROF / "cluster_communication.json"


@pytest.fixture(scope="module")
def msprof() -> Path:
    if not STEP_CSV.exists() or not COMM_JSON.exists():
        pytest.skip(f"msprof fixture not found at {MSPROF} (../shared/fixtures is absent)")
    return MSPROF


@pytest.fixture(scope="module")
def rows(msprof) -> dict[int, dict[str, float]]:
    with STEP_CSV.open(newline="") as f:
        return {int(r["Index"]): {k: float(v) for k, v in r.items() if k not in ("Step", "Type", "Index")}
                for r in csv.DictReader(f) if r["Type"] == "rank"}


@pytest.fixture(scope="module")
def graph(msprof) -> Graph:
    return import_traces([msprof])


def test_rank_metrics_are_the_csv_values_in_ms(graph, rows):
    ranks = graph.entities("rank")
    assert [r.attrs["rank"] for r in ranks] == sorted(rows)
    columns = {"compute_ms": "Computing", "comm_exposed_ms": "Communication(Not Overlapped)",
               "comm_overlapped_ms": "Overlapped", "comm_ms": "Communication", "free_ms": "Free",
               "step_time_ms": "Stage", "bubble_ms": "Bubble"}
    for n, row in rows.items():
        metrics = graph.entity(f"rank:trace:default:{n}").metrics
        for metric, column in columns.items():
            assert metrics[metric] == pytest.approx(row[column] / 1000, abs=1e-3), (n, metric)
        assert metrics["steps"] == 1
    assert graph.entity("job:trace:default").attrs["stages"] == [list(range(8))]
    assert {e.source for e in graph.edges("member_of")} == {r.id for r in ranks}
    assert graph.meta.source == "trace" and graph.meta.collectors["msprof"].status == "ok"


def test_collectives_and_their_edges(graph):
    data = json.loads(COMM_JSON.read_text())
    calls = data["(0, 1)"]["step"]
    (c,) = graph.entities("collective")
    assert c.id == "collective:trace:default:0,1:broadcast"
    assert c.attrs["op"] == "broadcast" and c.attrs["group"] == "0,1" and c.attrs["ranks"] == [0, 1]
    assert sorted(c.attrs["raw_names"]) == sorted(calls)
    assert c.metrics["calls"] == 2
    elapses = [r["Communication Time Info"]["Elapse Time(ms)"] for op in calls.values() for r in op.values()]
    assert c.metrics["duration_ms"] == pytest.approx(sum(elapses) / len(elapses), abs=1e-5)
    assert c.metrics["duration_ms_max"] == pytest.approx(max(elapses), abs=1e-5)
    for rank in ("0", "1"):
        edge = graph.edge(f"takes_part|rank:trace:default:{rank}|{c.id}")
        info = [op[rank]["Communication Time Info"] for op in calls.values()]
        for metric, field in (("elapse_ms", "Elapse Time(ms)"), ("wait_ms", "Wait Time(ms)"),
                              ("transit_ms", "Transit Time(ms)"), ("idle_ms", "Idle Time(ms)")):
            assert edge.metrics[metric] == pytest.approx(sum(i[field] for i in info), abs=1e-5), (rank, metric)
        for link in ("HCCS", "PCIE", "SDMA"):
            sizes = [op[rank]["Communication Bandwidth Info"][link]["Transit Size(MB)"] for op in calls.values()]
            per_link = graph.edge(f"takes_part|rank:trace:default:{rank}|{c.id}|{link}")
            if not any(sizes):
                assert per_link is None
                continue
            assert per_link.attrs["link"] == link
            assert per_link.metrics["transit_bytes"] == pytest.approx(sum(sizes) * 1e6, abs=1)
        assert graph.edge(f"takes_part|rank:trace:default:{rank}|{c.id}|RDMA") is None  # nothing moved over RDMA
    # in both calls rank 1 waited least: it arrived last
    assert graph.edge(f"takes_part|rank:trace:default:1|{c.id}").metrics["last_arrivals"] == 2
    assert graph.edge(f"takes_part|rank:trace:default:0|{c.id}").metrics["last_arrivals"] == 0


def test_diagnose_names_the_slow_rank_with_msprofs_formula(graph, rows):
    mean_step = sum(r["Computing"] + r["Communication(Not Overlapped)"] + r["Free"] for r in rows.values()) / len(rows)

    def gap(column):
        values = [r[column] for r in rows.values()]
        return (max(values) - min(values)) / mean_step * 100

    f = diagnose(graph).finding("control.slow_rank")
    assert f is not None and f.severity == "critical"
    assert f.subjects == ["rank:trace:default:1"]
    assert "rank 1" in f.description and "(max - min) / mean step" in f.description
    by_metric = {e.metric: e for e in f.evidence}
    exposed, free = by_metric["comm_exposed_ms gap"], by_metric["free_ms gap"]
    assert exposed.value == pytest.approx(gap("Communication(Not Overlapped)"), abs=1e-3)
    assert free.value == pytest.approx(gap("Free"), abs=1e-3)
    assert exposed.threshold == "> 20" and exposed.unit == "%"
    assert "compute_ms gap" not in by_metric  # compute differs by 0.1 % of the step: under msprof's 5 %
    assert gap("Computing") < 5
    # the rank that holds the others up: least exposed communication, most free time
    assert by_metric["comm_exposed_ms"].ids == ["rank:trace:default:1"]
    assert by_metric["comm_exposed_ms"].value == pytest.approx(rows[1]["Communication(Not Overlapped)"] / 1000,
                                                               abs=1e-3)
    assert by_metric["free_ms"].value == pytest.approx(rows[1]["Free"] / 1000, abs=1e-3)
    vote = by_metric["last_arrivals"]
    assert vote.ids == ["rank:trace:default:1"] and vote.value == 2 and "2 of 2" in vote.note


def test_slow_link_is_clear_on_two_ranks_and_patterns_without_traces_say_why(graph):
    d = diagnose(graph)
    assert d.status("network.slow_link") == "clear"
    empty = diagnose(Graph(Meta(hosts=["h1"], source="live")))
    for pattern in ("control.slow_rank", "network.slow_link"):
        assert empty.status(pattern) == "not_evaluated"
    assert "import-trace" in next(c.reason for c in empty.coverage if c.pattern == "control.slow_rank")


def test_the_files_given_directly_read_as_the_directory(msprof, graph):
    direct = import_traces([STEP_CSV, COMM_JSON])
    assert sorted(e.id for e in direct.entities()) == sorted(e.id for e in graph.entities())
    only_steps = import_traces([STEP_CSV], job="slurm:42")
    assert only_steps.entity("rank:slurm:42:3") is not None and not only_steps.entities("collective")
    assert only_steps.meta.collectors["msprof"].status == "partial"
    assert "cluster_communication.json" in only_steps.meta.collectors["msprof"].reason


def test_import_into_a_host_graph_joins_a_rank_to_its_process(msprof, tmp_path):
    host = Graph(Meta(hosts=["node1"], source="live"))
    host.entity_of("process", "process:node1:4242", {"pid": 4242, "name": "python3"})
    host.entity_of("job", "job:slurm:77", {"scheduler": "slurm", "job_id": "77"})
    # the job key comes from the host graph's one job
    joined = import_traces([msprof], into=host)
    assert joined is host and host.entity("rank:slurm:77:1") is not None
    assert host.meta.source == "live" and "msprof" in host.meta.collectors
    assert not host.edges("trace_of")  # msprof's files name no pid
    host.entity("rank:slurm:77:1").attrs.update(pid=4242, hostname="node1.cluster")  # as a Kineto trace would
    host.entity("rank:slurm:77:2").attrs.update(pid=999, hostname="node1")  # no such process
    assert join_processes(host) == 1
    (edge,) = host.edges("trace_of")
    assert (edge.source, edge.target) == ("rank:slurm:77:1", "process:node1:4242")


def test_names_of_ops_and_groups():
    assert op_name("hcom_broadcast__501_0@6297232067196334501") == "broadcast"
    assert op_name("hcom_allReduce__984_2_1@17346853049765658") == "allreduce"
    assert op_name("hcom_reduceScatter__1") == "reducescatter"
    assert op_name("nccl:all_reduce") == "allreduce"
    assert op_name("ncclDevKernel_AllGather_RING_LL") == "allgather"
    assert group_name("(0, 1, 2, 3)") == "0,1,2,3" and group_name("10.0.0.1%enp:6000") == "10.0.0.1%enp_6000"


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "witty_profiler", *argv], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


@pytest.mark.slow
def test_the_command_writes_the_graph_and_refuses_bad_input_in_one_line(msprof, tmp_path):
    out = tmp_path / "job.json"
    run = _cli("import-trace", str(msprof), "-o", str(out), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "8 ranks" in run.stderr and load_graph(out).entity("rank:trace:default:5") is not None
    again = _cli("import-trace", str(msprof), "-o", str(out), cwd=tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr
    bad_csv = tmp_path / "cluster_step_trace_time.csv"
    bad_csv.write_text("Step,Type,Index,Computing,Free\n,rank,0,1.0,2.0\n")
    bad_json = tmp_path / "x" / "cluster_communication.json"
    bad_json.parent.mkdir()
    bad_json.write_text('{"(0, 1)": {"step": {"hcom_allReduce__1": {"0": {"Communication Time Info": '
                        '{"Elapse Time(ms)": "soon"}}}}}}')
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    for given, words in ((bad_csv, "Communication(Not Overlapped)"), (bad_json, "Elapse Time(ms)"),
                         (other, "not a trace"), (tmp_path / "missing.json", "no such file")):
        run = _cli("import-trace", str(given), "-o", str(tmp_path / "o.json"), cwd=tmp_path)
        assert run.returncode == 2, run.stderr
        assert len(run.stderr.strip().splitlines()) == 1 and words in run.stderr and "Traceback" not in run.stderr


def test_malformed_inputs_name_the_file_and_the_field(tmp_path):
    path = tmp_path / "cluster_step_trace_time.csv"
    path.write_text("Step,Type,Index,Computing,Communication(Not Overlapped),Free\n,rank,x,1,2,3\n")
    with pytest.raises(InputError, match=r"cluster_step_trace_time.csv:2: Index"):
        import_traces([path])
    path.write_text("Step,Type,Index,Computing,Communication(Not Overlapped),Free\n,rank,0,1,two,3\n")
    with pytest.raises(InputError, match=r"Communication\(Not Overlapped\).*not a number"):
        import_traces([path])
    comm = tmp_path / "cluster_communication.json"
    path.unlink()
    comm.write_text("[1, 2]")
    with pytest.raises(InputError, match="cluster_communication.json: expected an object"):
        import_traces([tmp_path])
    import importlib.util
    if importlib.util.find_spec("witty_profiler.traces.kineto") is None:
        kineto = tmp_path / "rank0.json"
        kineto.write_text('{"traceEvents": []}')
        with pytest.raises(InputError, match="Kineto traces are not supported yet"):
            import_traces([kineto])


HEADER = "Step,Type,Index,Computing,Communication(Not Overlapped),Free\n"


@pytest.mark.parametrize("rows, where", [
    # a copy stopped in the middle of a row: the fields after the cut are missing
    (",rank,0,100,200,300\n,rank,1,100,2", r":3: the row ends after 5 of 6 fields \(cut short\?\): no 'Free'"),
    # ... or in the middle of the last number: no line end after it
    (",rank,0,100,200,300\n,rank,1,100,200,3", r":3: Free: the file ends in the middle of this row"),
    (",rank,0,100,200,300\n,rank,1,100,-200,300\n", r":3: Communication\(Not Overlapped\): '-200' is negative"),
    (",rank,0,100,200,300\n,rank,1,100,200,inf\n", r":3: Free: 'inf' is not a finite number"),
    (",rank,0,100,200,300\n,rank,0,100,200,300\n", r":3: Index: rank 0 given twice \(first on line 2\)"),
    ("1,rank,0,100,200,300\n1,rank,0,100,200,300\n", r":3: Index: rank 0 step 1 given twice"),
    (",rank,0,100,200,300,9\n", r":2: 7 fields, the header has 6"),
])
def test_a_step_file_cut_short_or_out_of_range_is_refused_with_its_line(tmp_path, rows, where):
    """Before, a cut row filled half a rank and changed which rank was slow, and a negative time hid it."""
    path = tmp_path / "cluster_step_trace_time.csv"
    path.write_text(HEADER + rows)
    with pytest.raises(InputError, match="cluster_step_trace_time.csv" + where):
        import_traces([path])


def test_steps_of_one_rank_and_a_whole_file_still_read(tmp_path):
    path = tmp_path / "cluster_step_trace_time.csv"
    path.write_text(HEADER.replace("\n", "\r\n") + "1,rank,0,100,200,300\r\n2,rank,0,100,200,500\r\n")
    (rank,) = import_traces([path]).entities("rank")
    assert rank.metrics["steps"] == 2 and rank.metrics["free_ms"] == 0.4


@pytest.mark.parametrize("text, where", [
    ('{"g": {"s": {"hcom_allReduce__1": {"0": {}, "0": {}}}}}', "'0' given twice in one object"),
    ('{"g": {"s": {"hcom_allReduce__1": {"0": {"Communication Time Info": {"Wait Time(ms)": -1}}}}}}',
     r"rank 0: 'Wait Time\(ms\)': '-1' is negative"),
])
def test_a_communication_file_with_a_rank_twice_or_a_negative_time_is_refused(tmp_path, text, where):
    path = tmp_path / "cluster_communication.json"
    path.write_text(text)
    with pytest.raises(InputError, match=where):
        import_traces([path])


def test_the_mcp_tool_imports_into_the_store_and_reads_paths_from_its_cwd(msprof, tmp_path):
    from witty_profiler.mcp_server import schemas
    from witty_profiler.app.graphs import GraphStore
    from witty_profiler.mcp_server.tools import WittyTools
    tools = WittyTools(GraphStore(tmp_path / "state"), workdir=msprof.parent)
    out, _ = tools.import_trace(schemas.ImportTraceInput(paths=["msprof"]))
    assert out.graph_id.startswith("trace-msprof-") and "rank 8" in tools.graph_summary(
        schemas.GraphSummaryInput(graph_id=out.graph_id)).text
    assert tools.store.get(out.graph_id).entity("rank:trace:default:1") is not None
    again, _ = tools.import_trace(schemas.ImportTraceInput(paths=["msprof"]))
    assert again.graph_id == out.graph_id
    with pytest.raises(InputError, match="no such file"):
        tools.import_trace(schemas.ImportTraceInput(paths=["missing.json"]))


def test_a_vote_of_some_ranks_that_contradicts_the_step_times_is_named(tmp_path):
    """Step times of 8 ranks point at rank 6 (free time 30 % of the step above the others'); the collective
    data covers ranks 0 and 1 only, and rank 1 arrived last in both calls: the finding is about rank 6 and says
    the two sources disagree, instead of adding rank 1's vote to rank 6's finding."""
    rows = "".join(f",rank,{r},{500_000},{100_000},{700_000 if r == 6 else 400_000}\n" for r in range(8))
    (tmp_path / "cluster_step_trace_time.csv").write_text(HEADER + rows)
    call = {"0": {"Communication Time Info": {"Elapse Time(ms)": 5, "Transit Time(ms)": 1, "Wait Time(ms)": 4}},
            "1": {"Communication Time Info": {"Elapse Time(ms)": 1.2, "Transit Time(ms)": 1, "Wait Time(ms)": 0.2}}}
    (tmp_path / "cluster_communication.json").write_text(json.dumps(
        {"(0, 1)": {"step1": {"hcom_allReduce__1_0@1": call, "hcom_allReduce__2_0@1": call}}}))
    f = diagnose(import_traces([tmp_path])).finding("control.slow_rank")
    assert f is not None and f.subjects[0] == "rank:trace:default:6"
    assert "the collective waits disagree: they point at rank 1, last to arrive in 2 of 2 calls (collective data " \
           "of 2 of the 8 ranks), not at rank 6" in f.description
