"""Compact layer views: budgets that always hold, lines never cut, the summary under 500 tokens,
every id and value a finding cites on a row of its layer's view, the real sample at <= 10 % of
its raw tokens with the placement facts an engineer needs, and the `convert` command."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading

import pytest

from witty_profiler.app.views import convert
from witty_profiler.converters import LAYER_VIEWS, View, count_tokens
from witty_profiler.converters.evidence import evidence_value
from witty_profiler.converters.render import MIN_TOKENS, duration_ms, duration_ns, duration_us, num, pct, rate, size
from witty_profiler.converters.views import LAYERS
from witty_profiler.topology import load_graph
from witty_profiler.topology.errors import InputError

from benchmarks.synthetic import synthetic_graph
from converter_graphs import hand_graph
from diagnosis_graphs import cgroup, device, host, new_graph, process, thread, two_numa_host, uses

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
def memory():
    """Memory pressure on the host and in the job's cgroup, and the job's two GPUs almost full
    (the hand graph has findings in every layer but this one), among 60 other processes."""
    g = new_graph(collectors={"process": "ok", "memory": "ok", "gpu": "ok"})
    host(g, psi_memory_some_pct=35.0, swap_in_pages_per_s=400.0, swap_out_pages_per_s=900.0,
         major_faults_per_s=6000.0, mem_total_bytes=64 * 2 ** 30, mem_available_bytes=2 * 2 ** 30,
         swap_used_bytes=7 * 2 ** 30, swap_total_bytes=8 * 2 ** 30)
    two_numa_host(g)
    process(g, 10, "python3", attrs={"framework": "pytorch"}, cpu_util_pct=80.0, rss_bytes=40 * 2 ** 30)
    for index, used in enumerate((97.0, 99.6)):
        uses(g, 10, device(g, "gpu", f"0000:{0x3b + index:02x}:00.0", index, numa_node=index, memory_used_pct=used,
                           memory_used_bytes=used / 100 * 80 * 2 ** 30, memory_total_bytes=80 * 2 ** 30))
    cgroup(g, "/kubepods/pod1", version="v2", members=(10,), psi_memory_some_pct=40.0,
           memory_usage_bytes=8 * 2 ** 30, memory_limit_bytes=8.1 * 2 ** 30)
    for pid in range(100, 160):
        process(g, pid, f"daemon{pid}", ai=None, role=None, cpu_util_pct=float(pid % 5), rss_bytes=pid * 2 ** 20)
    return g


@pytest.fixture(scope="session")
def live():
    """A live window of this host while a busy loop and a pipe run (2 s)."""
    try:
        from witty_profiler.collectors.engine import run_window
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


GRAPHS = ["hand", "sample", pytest.param("big", marks=pytest.mark.slow),
          pytest.param("live", marks=pytest.mark.live)]


def _graph(request, name):
    return request.getfixturevalue(name)


def _diagnosis(graph):
    try:
        from witty_profiler.diagnosis import diagnose
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
    assert LAYER_VIEWS == ("summary", *LAYERS, "flow", "all")
    with pytest.raises(InputError, match="unknown layer"):
        convert(hand, "gpu")
    for bad in (MIN_TOKENS - 1, 0, -5, 1.5, True):
        with pytest.raises(InputError, match="max_tokens"):
            convert(hand, "compute", bad)


# -- budgets --------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", GRAPHS)
def test_every_view_fits_every_budget(request, name):
    graph = _graph(request, name)
    for layer in LAYER_VIEWS:
        for budget in (MIN_TOKENS, *BUDGETS):
            view = convert(graph, layer, budget)
            assert isinstance(view, View) and view.layer == layer
            assert view.tokens == count_tokens(view.text) <= budget, (name, layer, budget)
            assert f"· {view.tokens} tokens" in view.text.splitlines()[0]
            if view.truncated and layer != "summary":
                assert view.omitted or "left out" in view.text
        summary = convert(graph, "summary")
        assert summary.tokens < 500, (name, summary.tokens)


@pytest.mark.parametrize("name", ["hand", "sample"])
def test_a_budget_drops_whole_rows_and_says_how_to_get_them(request, name):
    graph = _graph(request, name)
    for layer in LAYERS:
        full = [line.split() for line in convert(graph, layer).text.splitlines()]
        view = convert(graph, layer, 400)
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
        view = convert(hand, layer)
        assert not view.omitted and "… +" not in view.text


# -- completeness ---------------------------------------------------------------------------------
def _is_fold(line: str) -> bool:
    """A line that stands for rows left out (it may name cited ids, but shows none of their values)."""
    return line.startswith("… +") or re.search(r": \d+ [\w ]+ left out[ :(]", line) is not None


def _body(text: str) -> list[str]:
    """The lines that show something: not the header, a fold line, the `also cited` line or the legend."""
    return [line for line in text.splitlines()[1:]
            if not (_is_fold(line) or line.startswith(("also cited:", "legend: ")))]


def _finding_block(text: str, pattern: str) -> list[str] | None:
    """The evidence lines under a finding's `[P0] pattern: title` line (None: no such line)."""
    lines = text.splitlines()
    start = next((k for k, line in enumerate(lines) if re.match(rf"\[P\d\] {re.escape(pattern)}:", line)), None)
    if start is None:
        return None
    block = []
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        block.append(line)
    return block


def _as_cells(value, unit) -> set[str]:
    """How the views write an evidence value: on the findings line, or in a table cell by its unit."""
    if isinstance(value, bool) or not isinstance(value, (int, float, dict)):
        return {str(value)}
    out = {evidence_value(value, unit)}
    if isinstance(value, dict):
        return out
    by_unit = {"%": pct(value), "bytes/s": size(value, per_s=True), "bytes": size(value), "1/s": rate(value),
               "ms": duration_ms(value), "us": duration_us(value), "ns": duration_ns(value), "s": f"{num(value)}s",
               "ms/s": f"{duration_ms(value)}/s", "cores": f"{num(value)} cores"}
    out.add(by_unit.get(unit or "", num(value)))
    if unit == "bytes":
        out.add(f"{num(value)}B")
    return out


def _has(line: str, cell: str) -> bool:
    """`cell` is a whole cell or a whole space-separated part of one on `line`."""
    return re.search(rf"(?<![^\s,;(]){re.escape(cell)}(?![^\s,;)])", line) is not None


def _ends(graph, eid: str) -> tuple[str, ...]:
    if "|" not in eid:
        return (eid,)
    edge = graph.edge(eid)
    return (edge.source, edge.target) if edge else tuple(eid.split("|")[1:3])


def missing_evidence(graph, layer: str, text: str, finding) -> list[str]:
    """What of a finding's evidence the view of its layer does not show: each item's ids on a row
    (a line that shows something, outside the findings), and its value on the finding's line for
    that metric or on a row that carries one of the item's ids (for a relation without a number: a
    row that shows both ends)."""
    block = _finding_block(text, finding.pattern)
    if block is None:
        return [f"{finding.pattern}: not in the findings of its view"]
    rows = [line for line in _body(text) if not line.startswith("  ") and not re.match(r"\[P\d\] ", line)]
    problems = []
    for ev in finding.evidence:
        label = f"{finding.pattern} {ev.metric} {ev.ids[:2]}"
        for eid in ev.ids:
            if not all(any(shows(line, end) for line in rows) for end in _ends(graph, eid)):
                problems.append(f"{label}: id {eid} not on a row")
        if ev.kind == "edge" and not isinstance(ev.value, (int, float)):
            if not any(all(shows(line, end) for end in _ends(graph, eid)) for eid in ev.ids for line in rows):
                problems.append(f"{label}: no row shows the relation")
            continue
        cells = _as_cells(ev.value, ev.unit)
        metric_line = [line for line in block if line.startswith((f"  {ev.metric or ev.kind} (",
                                                                 f"  {ev.metric or ev.kind}:"))]
        carriers = [line for line in rows if any(shows(line, end) for eid in ev.ids for end in _ends(graph, eid))]
        if not any(_has(line, cell) for line in metric_line + carriers for cell in cells):
            problems.append(f"{label}: value {sorted(cells)} not on its findings line or a row of its ids")
    return problems


@pytest.mark.parametrize("name", [*GRAPHS, "memory"])
def test_every_cited_id_and_value_is_in_its_layer_view(request, name):
    graph = _graph(request, name)
    diagnosis = _diagnosis(graph)  # a quiet live host may have none: the hand-built graphs have them all
    problems = []
    for budget in (1000, 4000, 16000, None):
        for layer in LAYERS:
            found = [f for f in diagnosis.findings if f.layer == LAYERS.index(layer) + 1]
            if not found:
                continue
            text = convert(graph, layer, budget, diagnosis=diagnosis).text
            for finding in found:
                problems += [f"{layer} {budget}: {p}" for p in missing_evidence(graph, layer, text, finding)]
    assert not problems, "\n".join(problems[:40])


def test_a_saturation_that_counts_stolen_time_cites_what_the_compute_view_shows():
    g = new_graph(collectors={"process": "ok", "cpu": "ok"})
    host(g, cpu_util_pct=85.0, cpu_steal_pct=12.0, load1=3.0)
    process(g, 10, "train", cpu_util_pct=90.0)
    diagnosis = _diagnosis(g)
    finding = diagnosis.finding("compute.cpu_saturation")
    for budget in (1000, None):
        text = convert(g, "compute", budget, diagnosis=diagnosis).text
        assert not missing_evidence(g, "compute", text, finding), text


def test_a_lock_contention_finding_cites_what_the_control_view_shows():
    g = new_graph(collectors={"process": "ok", "ebpf": "ok"})
    process(g, 10, "train", cpu_util_pct=80.0)
    for tid, wait in ((11, 75.0), (12, 64.0), (13, 35.0)):
        lock = "0x7f00aa14" if tid == 13 else "0x7f00aa10"  # one condition variable's two words: one lock
        thread(g, 10, tid, attrs={"futex_addr": lock, "futex_mapping": "/usr/bin/python3.11"},
               futex_wait_pct=wait + 5, futex_lock_wait_pct=wait, futex_wakeups_per_s=300.0, cpu_util_pct=20.0)
    thread(g, 10, 14, name="pool", futex_wait_pct=99.0, futex_lock_wait_pct=99.0, futex_wakeups_per_s=0.5)
    diagnosis = _diagnosis(g)
    finding = diagnosis.finding("control.lock_contention")
    assert finding is not None and len(finding.subjects) == 3
    assert any(e.metric == "contended_threads" and e.value == 3 for e in finding.evidence)
    assert any(e.metric == "threads_on_one_lock" and e.value == 3 and "0x7f00aa10 in /usr/bin/python3.11" in e.note
               for e in finding.evidence)
    for budget in (1000, None):
        text = convert(g, "control", budget, diagnosis=diagnosis).text
        assert not missing_evidence(g, "control", text, finding), text


def test_the_test_graphs_have_findings_in_every_layer(hand, memory):
    layers = {f.layer for graph in (hand, memory) for f in _diagnosis(graph).findings}
    assert layers == set(range(1, 8)), layers  # otherwise the completeness test proves little
    assert {f.pattern for f in _diagnosis(memory).findings} >= {"memory.pressure", "memory.accelerator_memory_full"}


def test_the_completeness_check_catches_a_missing_row_or_value(hand):
    """The check above must be able to fail: the view without a cited row, or with a value changed."""
    diagnosis = _diagnosis(hand)
    finding = diagnosis.finding("storage.disk_saturation")
    text = convert(hand, "storage", 1000, diagnosis=diagnosis).text
    assert not missing_evidence(hand, "storage", text, finding)
    disk = "block_device:n1:nvme0n1"
    without_row = "\n".join(line for line in text.splitlines() if not line.startswith(disk)) + "\n"
    assert any("write_iops" in p for p in missing_evidence(hand, "storage", without_row, finding))
    folded = without_row + f"… +1 more disks (cited: {disk}): witty-profiler query GRAPH --type block_device\n"
    assert any("not on a row" in p for p in missing_evidence(hand, "storage", folded, finding))
    changed = text.replace("93%", "39%").replace("93.0%", "39.0%")
    assert any("disk_util_pct" in p for p in missing_evidence(hand, "storage", changed, finding))


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
    view = convert(sample, "all")
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
    text = convert(sample, "summary").text
    for pid in (1895087, 1895088, 1895089, 1895090):
        assert f"process:local:{pid}" in text
    assert "npu 8" in text and "numa nodes 8" in text and "legacy" in text


# -- the command line -----------------------------------------------------------------------------
def _cli(*args):
    return subprocess.run([sys.executable, "-m", "witty_profiler", *args], capture_output=True, text=True)


@pytest.mark.slow
def test_convert_command_writes_the_view_with_its_token_count(vllm_sample_path, tmp_path):
    out = tmp_path / "view.txt"
    done = _cli("convert", str(vllm_sample_path), "--layer", "interconnect", "--max-tokens", "1500", "-o", str(out))
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    header = text.splitlines()[0]
    assert header.startswith("## interconnect") and f"· {count_tokens(text)} tokens of 1500" in header
    assert f"witty-profiler query {vllm_sample_path}" in text


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["--layer", "gpu"], "invalid choice"),
    (["--max-tokens", "50"], "max_tokens must be"),
    (["--max-tokens", "many"], "invalid int value"),
])
def test_convert_command_bad_options_exit_2(vllm_sample_path, args, message):
    done = _cli("convert", str(vllm_sample_path), *args)
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.slow
def test_convert_command_missing_graph_exit_2(tmp_path):
    done = _cli("convert", str(tmp_path / "none.json"))
    assert done.returncode == 2 and "no such file" in done.stderr and "Traceback" not in done.stderr


def test_same_graph_same_text(vllm_sample_path):
    first = convert(load_graph(vllm_sample_path), "all", 3000).text
    again = convert(load_graph(vllm_sample_path), "all", 3000).text
    assert first == again


def test_an_empty_graph_renders_every_view_and_says_why_it_is_empty():
    from witty_profiler.topology import Graph
    graph = Graph()
    for layer in LAYER_VIEWS:
        view = convert(graph, layer, MIN_TOKENS)
        assert view.tokens <= MIN_TOKENS
    assert "0 entities" in convert(graph, "summary").text


@pytest.mark.parametrize("name", ["hand", "sample"])
def test_a_view_that_fits_its_budget_is_returned_whole(request, name):
    """A budget the whole view fits in changes nothing but the header: no note, no row is shed to
    make room that is not needed."""
    graph = _graph(request, name)
    for layer in LAYER_VIEWS:
        whole = convert(graph, layer)
        for budget in (max(whole.tokens + 8, MIN_TOKENS), whole.tokens + 400):
            if layer == "summary" and budget > 499:
                continue  # the summary is capped at 499 tokens whatever the budget
            fitted = convert(graph, layer, budget)
            assert fitted.text.split("\n", 1)[1] == whole.text.split("\n", 1)[1], (layer, budget)
            assert fitted.truncated == whole.truncated and fitted.tokens <= budget


def test_all_names_what_it_could_not_evaluate_on_one_line_per_layer(sample):
    """Inside `all` the reasons are one request away; the workload is listed once (by the compute view)."""
    text = convert(sample, "all").text
    skipped = [line for line in text.splitlines() if line.startswith("not evaluated")]
    assert skipped and all(line.endswith("--layer " + line.split("--layer ")[1]) for line in skipped)
    assert len(skipped) <= len(LAYERS)
    compute = next(line for line in skipped if line.endswith("diagnose GRAPH --layer compute)"))
    assert "cpu_starvation, cpu_saturation" in compute
    assert "workload: AI processes" not in text and "workload: AI processes" in convert(sample, "summary").text
    assert "not evaluated: interconnect.pcie_bottleneck (" in convert(sample, "interconnect").text
