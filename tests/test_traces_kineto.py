"""traces.kineto on real PyTorch profiler traces (../shared/fixtures/traces/kineto) and on small made-up ones.

The expected values are computed here again from the raw events, loaded whole with json, by a plain
clip-sort-merge of the intervals of each step: a second implementation, not the reader's own code."""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import SHARED
from witty_profiler.topology import jsonstream
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.vocabulary import E, M, T
from witty_profiler.traces import kineto
from witty_profiler.traces.importer import import_traces
from witty_profiler.traces.kineto import read_kineto

KINETO = SHARED / "traces" / "kineto"
JOB = "trace:default"


def _fixture(name: str) -> Path:
    path = KINETO / name
    if not path.exists():
        pytest.skip(f"Kineto fixture not found at {path} (../shared/fixtures is absent)")
    return path


@pytest.fixture(scope="session")
def sampled0():
    path = _fixture("sampled_rank-0.json.gz")
    return path, json.load(gzip.open(path)), read_kineto(path, JOB)


@pytest.fixture(scope="session")
def sampled1():
    path = _fixture("sampled_rank-1.json.gz")
    return path, json.load(gzip.open(path)), read_kineto(path, JOB)


@pytest.fixture(scope="session")
def nccl2():
    path = _fixture("nccl_2rank_rank0.json.gz")
    return path, json.load(gzip.open(path)), read_kineto(path, JOB)


# -- the expected values, again, from the raw events ------------------------------------------------------
def _union_within(intervals, lo, hi) -> float:
    clipped = sorted((max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo))
    total, cur_s, cur_e = 0.0, None, None
    for s, e in clipped:
        if cur_e is None or s > cur_e:
            total += (cur_e - cur_s) if cur_e is not None else 0.0
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + ((cur_e - cur_s) if cur_e is not None else 0.0)


def _expected(doc):
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    steps = {}
    for e in events:
        if e["name"].startswith("ProfilerStep#") and e["cat"] in ("cpu_op", "user_annotation"):
            steps.setdefault(e["name"], (e["ts"], e["ts"] + e["dur"]))
    kernels = [e for e in events if e["cat"] == "kernel"]
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in kernels if e["name"].startswith("nccl")]
    compute = [(e["ts"], e["ts"] + e["dur"]) for e in kernels if not e["name"].startswith("nccl")]
    mem = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] in ("gpu_memcpy", "gpu_memset")]
    per = defaultdict(list)
    for lo, hi in sorted(steps.values()):
        per["step"].append((hi - lo) / 1000)
        per["compute"].append(_union_within(compute, lo, hi) / 1000)
        per["comm"].append(_union_within(comm, lo, hi) / 1000)
        per["kernels"].append(_union_within(compute + comm, lo, hi) / 1000)
        per["free"].append((hi - lo - _union_within(compute + comm + mem, lo, hi)) / 1000)
    colls = defaultdict(list)
    for e in kernels:
        if e["name"].startswith("nccl"):
            op = e.get("args", {}).get("Collective name") or re.match(r"nccl(?:Dev)?Kernel_([A-Za-z]+)",
                                                                        e["name"]).group(1).lower()
            colls[op].append(e)
    return per, colls


def _rank(graph):
    (rank,) = graph.entities(T.RANK)
    return rank


def _mean(values):
    return sum(values) / len(values)


# -- the real traces --------------------------------------------------------------------------------------
@pytest.mark.parametrize("which, rank_no", [("sampled0", 0), ("sampled1", 1)])
def test_a_rank_of_the_128_rank_job(which, rank_no, request):
    path, doc, graph = request.getfixturevalue(which)
    rank = _rank(graph)
    assert rank.id == f"rank:{JOB}:{rank_no}"
    assert rank.attrs["rank"] == rank_no and rank.attrs["world_size"] == 128 and rank.attrs["source"] == "kineto"
    assert rank.attrs["file"] == str(path) and rank.attrs["pid"] == {0: 4037, 1: 4045}[rank_no]
    assert graph.meta.collectors["kineto"].status == "ok"
    (job,) = graph.entities(T.JOB)
    assert job.id == "job:trace:default" and job.attrs["world_size"] == 128
    assert [(e.source, e.target) for e in graph.edges(E.MEMBER_OF)] == [(rank.id, job.id)]


@pytest.mark.parametrize("which", ["sampled0", "sampled1"])
def test_steps_are_the_profiler_step_spans(which, request):
    _, doc, graph = request.getfixturevalue(which)
    per, _ = _expected(doc)
    m = _rank(graph).metrics
    assert m[M.STEPS] == len(per["step"]) == 2
    assert m[M.STEP_TIME_MS] == pytest.approx(_mean(per["step"]), abs=1e-3)
    assert m[M.STEP_TIME_MS + "_max"] == pytest.approx(max(per["step"]), abs=1e-3)
    for name, key in ((M.COMPUTE_MS, "compute"), (M.COMM_MS, "comm"), (M.FREE_MS, "free")):
        assert m[name] == pytest.approx(_mean(per[key]), abs=1e-3), name
        assert m[name + "_max"] == pytest.approx(max(per[key]), abs=1e-3), name
    busy = [100 * k / s for k, s in zip(per["kernels"], per["step"])]
    assert m[M.KERNEL_BUSY_PCT] == pytest.approx(_mean(busy), abs=1e-3)


@pytest.mark.parametrize("which", ["sampled0", "sampled1"])
def test_exposed_and_overlapped_communication_add_up(which, request):
    _, _, graph = request.getfixturevalue(which)
    m = _rank(graph).metrics
    assert m[M.COMM_EXPOSED_MS] + m[M.COMM_OVERLAPPED_MS] == pytest.approx(m[M.COMM_MS], abs=2e-3)
    assert 0 <= m[M.COMM_OVERLAPPED_MS] <= min(m[M.COMM_MS], m[M.COMPUTE_MS])
    assert 0 <= m[M.FREE_MS] <= m[M.STEP_TIME_MS] and 0 <= m[M.KERNEL_BUSY_PCT] <= 100
    assert M.DATA_LOADING_MS not in m  # no DataLoader span in these traces: unknown, not 0


@pytest.mark.parametrize("which", ["sampled0", "sampled1"])
def test_nccl_kernels_per_collective(which, request):
    _, doc, graph = request.getfixturevalue(which)
    _, colls = _expected(doc)
    assert {op: len(k) for op, k in colls.items()} == {"sendrecv": 10}
    (coll,) = graph.entities(T.COLLECTIVE)
    assert coll.id == f"collective:{JOB}:unknown:sendrecv"  # no process group in the trace
    durations = [e["dur"] / 1000 for e in colls["sendrecv"]]
    assert coll.metrics[M.CALLS] == 10
    assert coll.metrics[M.DURATION_MS] == pytest.approx(_mean(durations), abs=1e-3)
    assert coll.metrics[M.DURATION_MS + "_max"] == pytest.approx(max(durations), abs=1e-3)
    assert M.TRANSIT_BYTES not in coll.metrics  # the kernels carry no message size
    (edge,) = graph.edges(E.TAKES_PART)
    assert edge.source == _rank(graph).id and edge.target == coll.id and edge.metrics[M.CALLS] == 10


@pytest.mark.slow
def test_the_2_rank_trace_with_its_process_group(nccl2):
    _, doc, graph = nccl2
    per, colls = _expected(doc)
    rank = _rank(graph)
    assert rank.attrs["nccl_version"] == "2.17.1" and rank.attrs["world_size"] == 2
    assert rank.attrs["started_at"].startswith("2024-05-23T00:15:22")  # baseTimeNanoseconds + ts
    m = rank.metrics
    assert m[M.STEPS] == 3 and m[M.STEP_TIME_MS] == pytest.approx(_mean(per["step"]), abs=1e-3)
    assert m[M.COMPUTE_MS] == pytest.approx(_mean(per["compute"]), abs=1e-3)
    assert m[M.COMM_MS] == pytest.approx(_mean(per["comm"]), abs=1e-3)
    assert m[M.COMM_EXPOSED_MS] + m[M.COMM_OVERLAPPED_MS] == pytest.approx(m[M.COMM_MS], abs=2e-3)
    assert sum(len(k) for k in colls.values()) == 21
    by_op = {c.attrs["op"]: c for c in graph.entities(T.COLLECTIVE)}
    assert set(by_op) == set(colls) == {"allreduce", "broadcast"}
    for op, kernels in colls.items():
        coll = by_op[op]
        assert coll.id == f"collective:{JOB}:0:{op}"
        assert coll.attrs["ranks"] == [0, 1] and coll.attrs["group_desc"] == "default_pg"
        assert coll.metrics[M.CALLS] == len(kernels)
        assert coll.metrics[M.DURATION_MS] == pytest.approx(_mean([k["dur"] / 1000 for k in kernels]), abs=1e-3)
        size = {"Float": 4, "Long": 8}  # the dtypes of this trace
        nbytes = sum(max(k["args"]["In msg nelems"], k["args"]["Out msg nelems"]) * size[k["args"]["dtype"]]
                     for k in kernels)
        assert coll.metrics[M.TRANSIT_BYTES] == nbytes
        seconds = sum(k["dur"] for k in kernels) / 1e6
        assert coll.metrics[M.BANDWIDTH_GBYTES_PER_S] == pytest.approx(nbytes / seconds / 1e9, abs=1e-3)


# -- made-up traces: streaming, statuses, bad input -------------------------------------------------------
def _events(step_us=(0, 1000), kernels=((100, 300), (500, 600)), nccl=((250, 450),)):
    evs = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 7, "tid": 7,
            "ts": step_us[0], "dur": step_us[1] - step_us[0]},
           {"ph": "X", "cat": "cpu_op", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            "pid": 7, "tid": 7, "ts": 10, "dur": 40}]
    evs += [{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": s, "dur": e - s}
            for s, e in kernels]
    evs += [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL", "pid": 0, "tid": 9, "ts": s,
             "dur": e - s, "args": {"In msg nelems": 10**7, "Out msg nelems": 2 * 10**7, "dtype": "BFloat16",
                                    "Process Group Name": "3", "Process Group Ranks": "[0, 2]"}}
            for s, e in nccl]
    evs.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 3, "ts": 700, "dur": 50})
    return evs


def _write(path: Path, doc, gz: bool = True, indent=None) -> Path:
    text = json.dumps(doc, indent=indent)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_overlap_free_time_and_data_loading_of_a_small_trace(tmp_path):
    doc = {"traceEvents": _events(), "distributedInfo": {"rank": 2, "world_size": 4}}  # info after the events
    graph = read_kineto(_write(tmp_path / "t.json.gz", doc), "trace:x")
    m = graph.entity("rank:trace:x:2").metrics
    # compute [100,300] [500,600]; comm [250,450]: overlapped 50, exposed 150; busy adds memcpy [700,750]
    assert (m[M.STEP_TIME_MS], m[M.COMPUTE_MS], m[M.COMM_MS]) == (1.0, 0.3, 0.2)
    assert (m[M.COMM_OVERLAPPED_MS], m[M.COMM_EXPOSED_MS]) == (0.05, 0.15)
    assert m[M.FREE_MS] == pytest.approx(1.0 - 0.45 - 0.05)  # kernels [100,450] [500,600], memcpy
    assert m[M.KERNEL_BUSY_PCT] == pytest.approx(45.0) and m[M.DATA_LOADING_MS] == 0.04
    coll = graph.entity("collective:trace:x:3:allgather")
    assert coll.attrs["ranks"] == [0, 2] and coll.metrics[M.TRANSIT_BYTES] == 4 * 10**7  # 2e7 bf16 elements
    assert coll.metrics[M.BANDWIDTH_GBYTES_PER_S] == pytest.approx(4e7 / 200e-6 / 1e9)  # 200 GB/s


@pytest.mark.parametrize("indent", [None, 2])
def test_chunk_boundaries_and_folds_change_nothing(tmp_path, monkeypatch, indent):
    evs = []
    for i in range(40):  # 40 steps of the small trace, shifted
        evs += [{**e, "ts": e["ts"] + i * 1000, "name": e["name"].replace("#1", f"#{i}")} for e in _events()]
    path = _write(tmp_path / "big.json", {"distributedInfo": {"rank": 0}, "traceEvents": evs}, gz=False,
                  indent=indent)
    whole = read_kineto(path, JOB)
    monkeypatch.setattr(jsonstream, "CHUNK", 13)
    monkeypatch.setattr(kineto, "FOLD", 3)
    pieces = read_kineto(path, JOB)
    assert [e.to_dict() for e in pieces.entities()] == [e.to_dict() for e in whole.entities()]
    assert whole.entity(f"rank:{JOB}:0").metrics[M.STEPS] == 40


def test_the_bare_array_form_and_the_rank_from_the_file_name(tmp_path):
    graph = read_kineto(_write(tmp_path / "job_rank-5.json", _events(), gz=False), JOB)
    rank = graph.entity(f"rank:{JOB}:5")
    assert rank.attrs["rank"] == 5 and rank.metrics[M.STEPS] == 1
    status = graph.meta.collectors["kineto"]
    assert status.status == "partial" and "no distributedInfo" in status.reason and "file name" in status.reason


def test_a_trace_without_steps_or_rank_says_so(tmp_path):
    evs = [e for e in _events() if not e["name"].startswith("ProfilerStep")]
    graph = read_kineto(_write(tmp_path / "trace.json", {"traceEvents": evs}, gz=False), JOB)
    rank = graph.entity(f"rank:{JOB}:trace")  # named after the file
    assert rank.attrs.get("rank") is None and rank.metrics == {M.STEPS: 0}
    reason = graph.meta.collectors["kineto"].reason
    assert "rank unknown" in reason and "no ProfilerStep#N spans" in reason
    assert graph.entity(f"collective:{JOB}:3:allgather").metrics[M.CALLS] == 1


@pytest.mark.parametrize("content, message", [
    (b"{\"traceEvents\": [{\"ph\": \"X\",", "not valid JSON"),
    (b"{\"schemaVersion\": 1}", "no traceEvents array"),
    (b"{\"traceEvents\": {}}", "traceEvents is not an array"),
    (b"{\"traceEvents\": [1]}", "not an object"),
    (b"\xff\xfe{", "not UTF-8"),
    (b"{\"traceEvents\": []} x", "more data after"),
    (gzip.compress(b"{\"traceEvents\": []}")[:-6], "not a readable gzip file"),
])
def test_bad_input_is_one_line_naming_the_file(tmp_path, content, message):
    path = tmp_path / "bad.json.gz"
    path.write_bytes(content)
    with pytest.raises(InputError) as caught:
        read_kineto(path, JOB)
    text = str(caught.value)
    assert text.startswith(str(path)) and message in text and "\n" not in text


def test_a_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_kineto(tmp_path / "nope.json", JOB)


# -- the views --------------------------------------------------------------------------------------------
def test_the_control_and_network_views_show_the_ranks_and_collectives(sampled0, sampled1):
    from witty_profiler import convert
    from witty_profiler.topology.graph import Graph

    graph = Graph().merge(sampled0[2]).merge(sampled1[2])
    control = convert(graph, layer="control").text
    assert "ranks (trace), slowest step first (2)" in control
    assert f"rank:{JOB}:0" in control and f"rank:{JOB}:1" in control and "exposed" in control
    network = convert(graph, layer="network").text
    assert f"collective:{JOB}:unknown:sendrecv" in network and "algorithm bandwidth" in network


def test_the_trace_tables_fold_under_a_budget():
    from witty_profiler import convert
    from witty_profiler.topology.graph import Graph

    graph = Graph()
    for r in range(300):
        graph.entity_of(T.RANK, f"rank:trace:j:{r}", {"rank": r}, {M.STEPS: 3, M.STEP_TIME_MS: 100.0 + r % 17,
                                                                   M.COMPUTE_MS: 50.0, M.FREE_MS: 20.0})
    for c in range(60):
        graph.entity_of(T.COLLECTIVE, f"collective:trace:j:{c}:allreduce", {"op": "allreduce", "group": str(c)},
                        {M.CALLS: c + 1, M.DURATION_MS: 1.5})
    for layer, noun in (("control", "ranks"), ("network", "collectives")):
        view = convert(graph, layer=layer, max_tokens=300)
        # (a finding may cite the rows left out: a few are named before the command that lists them all)
        assert view.tokens <= 300 and re.search(rf"… \+\d+ more {noun}( \(cited: .*\))?: witty-profiler query GRAPH "
                                                "--type", view.text), view.text
    assert "rank:trace:j:16 " in convert(graph, layer="control", max_tokens=300).text  # the slowest first


@pytest.mark.slow
def test_import_trace_puts_both_ranks_of_a_job_in_one_graph(tmp_path):
    """The CLI on two ranks' files: one job, ranks 0 and 1 (of 128), and the collective they share pooled
    from both ranks' calls (merging alone would keep the last file's mean)."""
    import subprocess
    import sys

    from witty_profiler.topology import load_graph

    files = [_fixture(f"sampled_rank-{r}.json.gz") for r in (0, 1)]
    out = tmp_path / "job.json"
    done = subprocess.run([sys.executable, "-m", "witty_profiler", "import-trace", *map(str, files), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    graph = load_graph(out)
    ranks = sorted((r.attrs["rank"], r.attrs.get("world_size")) for r in graph.entities(T.RANK))
    assert ranks == [(0, 128), (1, 128)]
    assert {e.target for e in graph.edges(E.MEMBER_OF)} == {f"job:{JOB}"}
    (collective,) = graph.entities(T.COLLECTIVE)
    edges = [e for e in graph.edges(E.TAKES_PART) if e.target == collective.id]
    calls = sum(e.metrics[M.CALLS] for e in edges)
    pooled = sum(e.metrics[M.CALLS] * e.metrics[M.DURATION_MS] for e in edges) / calls
    assert collective.metrics[M.DURATION_MS] == pytest.approx(pooled, abs=1e-3)
    assert collective.metrics[M.DURATION_MS + "_max"] == max(e.metrics[M.DURATION_MS + "_max"] for e in edges)


@pytest.mark.slow
def test_a_trace_without_a_hostname_joins_the_one_host_process_that_was_already_running():
    """Kineto traces seldom name their host: with one host in the graph, the trace's pid is that host's
    process only if it had started before the trace (a pid alone may have been reused since)."""
    from witty_profiler.topology.graph import Graph
    from witty_profiler.topology.models import Meta
    from witty_profiler.traces.importer import import_traces

    path = _fixture("nccl_2rank_rank0.json.gz")
    for started, joined in (("2020-01-01T00:00:00Z", True), ("2099-01-01T00:00:00Z", False)):
        host = Graph(Meta(hosts=["gpu7"], source="live"))
        host.entity_of(T.PROCESS, "process:gpu7:2910249", {"pid": 2910249, "name": "python", "started_at": started})
        graph = import_traces([path], into=host)
        edges = [(e.source, e.target) for e in graph.edges(E.TRACE_OF)]
        assert edges == ([(f"rank:{JOB}:0", "process:gpu7:2910249")] if joined else []), started


# -- traces of one run, or not --------------------------------------------------------------------------
def _rank_trace(path: Path, rank: int, world: int, start_us: float = 1.7e15, ranks: str = "[0, 1]") -> Path:
    doc = {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
           "traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 7, "tid": 7,
                            "ts": start_us, "dur": 1000},
                           {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0,
                            "tid": 9, "ts": start_us + 100, "dur": 50,
                            "args": {"Process Group Name": "0", "Process Group Ranks": ranks}}]}
    return _write(path, doc)


@pytest.mark.parametrize("second, fact", [
    (dict(rank=0, world=2), r"r1.json.gz: rank 0 again \(distributedInfo.rank\), as in .*r0.json.gz"),
    (dict(rank=1, world=8), r"r1.json.gz: world size 8 \(distributedInfo.world_size\), but 2 in .*r0.json.gz"),
    (dict(rank=1, world=2, start_us=1.7e15 + 9 * 86400e6), r"r1.json.gz: recorded at .*, 9.0 days from .*r0.json.gz"),
    (dict(rank=1, world=2, ranks="[1, 2]"), r"r1.json.gz: process group 0 holds ranks \[1, 2\], but \[0, 1\]"),
])
def test_traces_of_different_runs_are_not_one_job(tmp_path, second, fact):
    """Two rank-0 traces used to become one rank (one dropped with its findings), and ranks of runs days
    apart one job with a slow rank: now exit 2 naming the fact that disagrees."""
    first = _rank_trace(tmp_path / "r0.json.gz", 0, 2)
    other = _rank_trace(tmp_path / "r1.json.gz", **second)
    with pytest.raises(InputError, match=fact):
        import_traces([first, other])
    if "again" not in fact:  # the user may say they are one job; a rank twice never is
        graph = import_traces([first, other], job="trace:mine")
        assert len(graph.entities(T.RANK)) == 2
    else:
        with pytest.raises(InputError, match="again"):
            import_traces([first, other], job="trace:mine")


def test_the_ranks_of_one_run_join(tmp_path):
    paths = [_rank_trace(tmp_path / f"r{n}.json.gz", n, 2, start_us=1.7e15 + n * 60e6) for n in (0, 1)]
    assert sorted(r.attrs["rank"] for r in import_traces(paths).entities(T.RANK)) == [0, 1]


@pytest.mark.parametrize("pg_config", [1, "x", None, [1, {"pg_name": "0", "ranks": "[0,"}], {"a": 1}])
def test_a_process_group_configuration_of_any_shape_is_read(tmp_path, pg_config):
    """A shape no PyTorch writes (found by tests/test_fuzz.py): the trace is read, its groups unknown."""
    doc = {"distributedInfo": {"rank": 0, "world_size": 2, "pg_config": pg_config}, "traceEvents": _events()}
    graph = read_kineto(_write(tmp_path / "rank0.json.gz", doc), JOB)
    assert graph.entities(T.RANK)
