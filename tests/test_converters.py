"""Compact layer views: budgets that always hold, lines never cut, the summary under 500 tokens,
every id and metric a finding cites present in its layer's view, the real sample at <= 10 % of
its raw tokens with the placement facts an engineer needs, and the `convert` command."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading

import pytest

from benchmarks.synthetic import synthetic_graph
from converter_graphs import hand_graph
from converters import LAYER_VIEWS, View, count_tokens, render_view
from converters.render import MIN_TOKENS, duration_ns, num, pct, rate, size
from converters.views import LAYERS
from topology import load_graph
from topology.errors import InputError

BUDGETS = (1000, 4000, 16000)


# -- graphs -----------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def sample(vllm_sample_path):
    return load_graph(vllm_sample_path)


@pytest.fixture(scope="session")
def big():
    """The generated 100k-entity graph, built once per session (a few seconds)."""
    graph = synthetic_graph(100_000)
    assert graph.entity_count() == 100_000
    return graph


@pytest.fixture(scope="session")
def hand():
    return hand_graph()


@pytest.fixture(scope="session")
def live():
    """A live window of this host while a busy loop and a pipe run (2 s)."""
    try:
        from collectors.engine import run_window
    except ImportError as exc:  # the collectors land separately; the other graphs still run
        pytest.skip(f"live collection not available: {exc}")
    busy = subprocess.Popen([sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('x' * 4096)"],
                            stdout=subprocess.PIPE)
    reader = threading.Thread(target=lambda: [None for _ in iter(lambda: busy.stdout.read(65536), b"")], daemon=True)
    reader.start()
    try:
        return run_window(duration_s=2.0, interval_s=1.0)
    finally:
        busy.kill()
        busy.wait()


GRAPHS = ["hand", "sample", "big", "live"]


def _graph(request, name):
    return request.getfixturevalue(name)


def _diagnosis(graph):
    try:
        from diagnosis import diagnose
    except ImportError as exc:
        pytest.skip(f"diagnosis.diagnose is not importable yet: {exc}")
    return diagnose(graph)


# -- appearance of an id in a view --------------------------------------------------------------
def shows(text: str, eid: str) -> bool:
    """An entity id appears literally; a thread may also appear as `tid->node` on the line of
    its process (the interconnect view groups threads under their process)."""
    if eid in text:
        return True
    kind, host, *keys = eid.split(":")
    if kind == "thread" and len(keys) == 2:
        proc = f"process:{host}:{keys[0]}"
        return any(proc in line and re.search(rf"(^|\s){keys[1]}->", line) for line in text.splitlines())
    return False


def shows_edge(text: str, graph, eid: str) -> bool:
    """An edge appears as the rows of its two ends (its id is `type|source|target`)."""
    edge = graph.edge(eid)
    source, target = (edge.source, edge.target) if edge else eid.split("|")[1:3]
    return shows(text, source) and shows(text, target)


# -- formatting ---------------------------------------------------------------------------------
def test_numbers_carry_their_units():
    assert size(512) == "512B" and size(1536) == "1.5KiB" and size(3 * 2 ** 30) == "3GiB"
    assert size(2048, per_s=True) == "2KiB/s"
    assert pct(12.345) == "12.3%" and pct(250.0) == "250%" and pct(None) == "-"
    assert rate(1500) == "1.5k/s" and rate(12) == "12/s"
    assert duration_ns(5_870_000_000) == "5.87s" and duration_ns(194_000) == "194us"
    assert num(0.1 + 0.2) == "0.3" and num(30006) == "30006"


def test_layer_names_and_bad_requests(hand):
    assert LAYER_VIEWS == ("summary", *LAYERS, "all")
    with pytest.raises(InputError, match="unknown layer"):
        render_view(hand, "gpu")
    for bad in (MIN_TOKENS - 1, 0, -5, 1.5, True):
        with pytest.raises(InputError, match="max_tokens"):
            render_view(hand, "compute", bad)


# -- budgets --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", GRAPHS)
def test_every_view_fits_every_budget(request, name):
    graph = _graph(request, name)
    for layer in LAYER_VIEWS:
        for budget in (MIN_TOKENS, *BUDGETS):
            view = render_view(graph, layer, budget)
            assert isinstance(view, View) and view.layer == layer
            assert view.tokens == count_tokens(view.text) <= budget, (name, layer, budget)
            assert f"· {view.tokens} tokens" in view.text.splitlines()[0]
            if view.truncated and layer != "summary":
                assert view.omitted or "left out" in view.text
        summary = render_view(graph, "summary")
        assert summary.tokens < 500, (name, summary.tokens)


@pytest.mark.parametrize("name", ["hand", "sample"])
def test_a_budget_drops_whole_rows_and_says_how_to_get_them(request, name):
    graph = _graph(request, name)
    for layer in LAYERS:
        full = [line.split() for line in render_view(graph, layer).text.splitlines()]
        view = render_view(graph, layer, 400)
        for line in view.text.splitlines()[1:]:
            if line.startswith("… +") or " left out" in line:
                assert "witty-profiler " in line  # the fold line names the command that lists the rest
                continue
            if re.search(r"\(\d+ of \d+\)$", line):
                continue  # a table title with its count
            # a whole line of the unbounded view; a column empty on every row shown may be dropped
            assert any(_within(line.split(), other) for other in full), (layer, line)


def _within(cells: list[str], other: list[str]) -> bool:
    """`cells` are `other`'s cells in order, some left out, starting with the same first cell."""
    if not cells or not other or cells[0] != other[0]:
        return False
    rest = iter(other)
    return all(cell in rest for cell in cells)


def test_unbounded_views_hide_nothing_on_the_hand_graph(hand):
    for layer in LAYERS:
        view = render_view(hand, layer)
        assert not view.omitted and "… +" not in view.text


# -- completeness ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", GRAPHS)
def test_every_cited_id_and_metric_is_in_its_layer_view(request, name):
    graph = _graph(request, name)
    diagnosis = _diagnosis(graph)
    layer_names = dict((n, v) for n, v in zip(range(1, 8), LAYERS))
    for budget in (1000, 4000):
        texts = {layer: render_view(graph, layer, budget).text for layer in LAYERS}
        for finding in diagnosis.findings:
            text = texts[layer_names[finding.layer]]
            assert finding.pattern in text, (name, budget, finding.pattern)
            for ev in finding.evidence:
                for eid in ev.ids:
                    ok = shows_edge(text, graph, eid) if "|" in eid else shows(text, eid)
                    assert ok, (name, budget, finding.pattern, eid)
                if ev.metric:
                    assert ev.metric in text, (name, budget, finding.pattern, ev.metric)


def test_the_hand_graph_has_findings_in_most_layers(hand):
    layers = {f.layer for f in _diagnosis(hand).findings}
    assert len(layers) >= 5  # otherwise the completeness test above proves little


# -- the real sample ------------------------------------------------------------------------------
def _raw_workers(path):
    """From the raw legacy file, independently of the reader: each NPU user's device, the NUMA
    node of the device (by its CPU affinity), allowed CPUs and pages per node; and the flows."""
    data = json.loads(path.read_text())
    data = data.get("content", data)
    node_of_cpu = {}
    for n in data["nodes"]:
        if n["entity_type"] == "NumaEntity":
            a, b = n["cpu_set"].split("-")
            node_of_cpu.update({c: n["numa_id"] for c in range(int(a), int(b) + 1)})
    access = {e["source_node"]["pid"]: e["numa_access_info"] for e in data["edges"]
              if e["edge_type"] == "NumaAccessEdge"}
    workers = {}
    for e in data["edges"]:
        if e["edge_type"] == "AccessEdge":
            pid, dev = e["source_node"]["pid"], e["target_node"]
            first_cpu = int(dev["cpu_affinity"].split("-")[0])
            workers[pid] = {"npu": f"npu:local:{dev['pci_bus_id'].lower()}", "node": node_of_cpu[first_cpu],
                            "cpus": access[pid]["proc_status"]["cpus_allowed_list"],
                            "pages": access[pid]["total_pages"]}
    flows = [(e["source_node"]["tid"], e["target_node"]["socket_port"], e["data_flow"]["data_size"])
             for e in data["edges"] if e["edge_type"] == "SendToSocketEdge"]
    return workers, flows


def test_all_on_the_real_sample_is_small_and_keeps_the_placement_facts(sample, vllm_sample_path):
    raw_tokens = count_tokens(vllm_sample_path.read_text())
    view = render_view(sample, "all")
    assert view.tokens <= raw_tokens * 0.10, (view.tokens, raw_tokens)
    workers, flows = _raw_workers(vllm_sample_path)
    assert len(workers) == 4 and len(flows) == 44
    lines = view.text.splitlines()
    for pid, w in workers.items():
        pid_id = f"process:local:{pid}"
        placement = [ln for ln in lines if ln.startswith(pid_id) and w["npu"] in ln]
        assert placement, pid  # the worker's row with its NPU
        wanted = rf"{re.escape(w['npu'])}\s+{w['node']}\s+{re.escape(w['cpus'])}\s"  # device, its node, allowed CPUs
        assert any(re.search(wanted, ln) for ln in placement), placement
        # the full page distribution, node:pages, on the worker's memory row
        memory = [ln for ln in lines if ln.startswith(pid_id) and all(f"{k}:{v}" in ln for k, v in w["pages"].items())]
        assert memory, (pid, w["pages"])
    for tid, port, size_bytes in flows:
        assert any(f":{port} " in ln and f"{size_bytes}B" in ln and f":{tid}" in ln for ln in lines), (tid, port)


def test_summary_of_the_real_sample_names_the_workload_and_devices(sample):
    text = render_view(sample, "summary").text
    for pid in (1895087, 1895088, 1895089, 1895090):
        assert f"process:local:{pid}" in text
    assert "npu 8" in text and "numa nodes 8" in text and "legacy" in text


# -- the command line -----------------------------------------------------------------------------
def _cli(*args):
    return subprocess.run([sys.executable, "-m", "witty_profiler", *args], capture_output=True, text=True)


def test_convert_command_writes_the_view_with_its_token_count(vllm_sample_path, tmp_path):
    out = tmp_path / "view.txt"
    done = _cli("convert", str(vllm_sample_path), "--layer", "interconnect", "--max-tokens", "1500", "-o", str(out))
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    header = text.splitlines()[0]
    assert header.startswith("## interconnect") and f"· {count_tokens(text)} tokens of 1500" in header
    assert f"witty-profiler query {vllm_sample_path}" in text


@pytest.mark.parametrize("args, message", [
    (["--layer", "gpu"], "invalid choice"),
    (["--max-tokens", "50"], "max_tokens must be"),
    (["--max-tokens", "many"], "invalid int value"),
])
def test_convert_command_bad_options_exit_2(vllm_sample_path, args, message):
    done = _cli("convert", str(vllm_sample_path), *args)
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1


def test_convert_command_missing_graph_exit_2(tmp_path):
    done = _cli("convert", str(tmp_path / "none.json"))
    assert done.returncode == 2 and "no such file" in done.stderr and "Traceback" not in done.stderr


def test_same_graph_same_text(vllm_sample_path):
    first = render_view(load_graph(vllm_sample_path), "all", 3000).text
    again = render_view(load_graph(vllm_sample_path), "all", 3000).text
    assert first == again


def test_an_empty_graph_renders_every_view_and_says_why_it_is_empty():
    from topology import Graph
    graph = Graph()
    for layer in LAYER_VIEWS:
        view = render_view(graph, layer, MIN_TOKENS)
        assert view.tokens <= MIN_TOKENS
    assert "0 entities" in render_view(graph, "summary").text
