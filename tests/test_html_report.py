"""The HTML report (`diagnose --format html`) and its topology picture, read as markup: one element per
device and workload process, placement colours, links from findings to the picture, escaping, a
stable layout at 1, 2 and 8 NUMA nodes, no resource from outside the page. A real browser loads it in
tests/test_html_browser.py."""

from __future__ import annotations

import base64
import json
import hashlib
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from witty_profiler.cli import main
from witty_profiler.converters.svg import element_id, topology_svg
from witty_profiler.converters.svgscene import CHIPS_MAX, LOCAL, OTHERS_MAX, REMOTE
from witty_profiler.diagnosis import diagnose
from witty_profiler.app.htmlreport import CONTENT_SECURITY_POLICY, render_html
from witty_profiler.topology import load_graph
from witty_profiler.topology.hosts import merge_hosts
from witty_profiler.topology.cpulist import parse_cpulist
from witty_profiler.topology.ids import cpu_id, numa_id, process_id

from benchmarks.synthetic import synthetic_graph
from diagnosis_graphs import H, allocates_on, device, ipc, new_graph, numa, process, runs_on, thread, two_numa_host, uses

REPO = Path(__file__).resolve().parents[1]
SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = "<script>alert(1)</script>"


class _Page(HTMLParser):
    """The ids of a page, its links to ids (href and data-cites), its script and style elements."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.cites: list[tuple[str, list[str]]] = []  # (finding pattern or '', element ids)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self._finding = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "article":
            self._finding = a.get("data-pattern") or ""
        if "data-cites" in a:
            self.cites.append((self._finding, (a["data-cites"] or "").split()))


def _parse(page: str) -> _Page:
    parsed = _Page()
    parsed.feed(page)
    return parsed


def _svgs(page: str) -> list[ET.Element]:
    """Every inline SVG of the page, parsed as XML: one that is not well-formed fails here."""
    return [ET.fromstring(m) for m in re.findall(r"<svg\b.*?</svg>", page, re.S)]


def _entities(svg: ET.Element) -> dict[str, ET.Element]:
    return {g.get("data-entity"): g for g in svg.iter(f"{SVG}g") if g.get("data-entity")}


def _rect(g: ET.Element) -> tuple[float, float, float, float]:
    r = g.find(f"{SVG}rect")
    return float(r.get("x")), float(r.get("y")), float(r.get("width")), float(r.get("height"))


def _inside(inner, outer) -> bool:
    return (inner[0] >= outer[0] and inner[1] >= outer[1] and inner[0] + inner[2] <= outer[0] + outer[2]
            and inner[1] + inner[3] <= outer[1] + outer[3])


def _overlap(a, b) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


@pytest.fixture(scope="module")
def vllm(vllm_sample_path):
    graph = load_graph(vllm_sample_path)
    return graph, diagnose(graph)


# -- the real 8-NPU sample ------------------------------------------------------------------------------
def test_the_sample_draws_every_npu_and_every_worker(vllm):
    graph, report = vllm
    svg, = _svgs(render_html(graph, report))
    drawn = _entities(svg)
    assert sorted(e for e in drawn if e.startswith("npu:")) == [d.id for d in graph.entities("npu")]
    workload = sorted(p.id for p in graph.entities("process") if p.attrs.get("ai") is True)
    assert len(workload) == 6
    assert sorted(e for e, g in drawn.items() if "workload" in g.get("class").split()) == workload
    assert sorted(e for e in drawn if e.startswith("numa_node:")) == [n.id for n in graph.entities("numa_node")]


def test_the_sample_colours_each_worker_by_where_it_runs_against_its_npu(vllm):
    """The four workers that use an NPU all run away from it (the device_numa_mismatch finding):
    each line is red, and the finding cites each of them."""
    graph, report = vllm
    page = render_html(graph, report)
    drawn = _entities(_svgs(page)[0])
    lines = {e: g for e, g in drawn.items() if e.startswith("uses_device|")}
    assert sorted(lines) == sorted(e.id for e in graph.edges("uses_device"))
    assert {g.find(f"{SVG}path").get("stroke") for g in lines.values()} == {REMOTE}
    mismatch = [c for pattern, c in _parse(page).cites if pattern == "interconnect.device_numa_mismatch"]
    cited = {i for ids in mismatch for i in ids}
    assert {element_id(e) for e in lines} <= cited


def test_every_link_of_every_finding_lands_on_the_picture(vllm):
    graph, report = vllm
    page = _parse(render_html(graph, report))
    svg_ids = {g.get("id") for g in _svgs(render_html(graph, report))[0].iter(f"{SVG}g") if g.get("id")}
    patterns = {f.pattern for f in report.findings}
    assert patterns and {p for p, _ in page.cites} == patterns  # every finding links somewhere
    for pattern, ids in page.cites:
        assert ids and set(ids) <= svg_ids, pattern
    hrefs = [a["href"][1:] for tag, a in page.tags if tag == "a" and (a.get("href") or "").startswith("#wp-")]
    assert hrefs and set(hrefs) <= svg_ids


def test_the_page_is_the_same_bytes_for_the_same_diagnosis(vllm):
    graph, report = vllm
    assert render_html(graph, report) == render_html(graph, diagnose(graph))


def test_the_page_needs_nothing_from_outside(vllm):
    """No URL but in-page anchors, one script and one style, both allowed by hash in the page's policy."""
    page = render_html(*vllm)
    parsed = _parse(page)
    for tag, attrs in parsed.tags:
        for name in ("src", "href", "action", "srcset", "poster", "data"):
            value = attrs.get(name)
            assert value is None or value.startswith("#"), (tag, name, value)
    assert "url(" not in page and "@import" not in page
    assert [t for t, _ in parsed.tags].count("script") == 1 and [t for t, _ in parsed.tags].count("style") == 1
    meta = [a["content"] for t, a in parsed.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert meta == [CONTENT_SECURITY_POLICY] and "default-src 'none'" in meta[0]
    for tag in ("script", "style"):
        body, = re.findall(rf"<{tag}>(.*?)</{tag}>", page, re.S)
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in meta[0]


def test_diagnose_writes_the_page(vllm_sample_path, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["diagnose", str(vllm_sample_path), "--format", "html", "-o", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>") and "interconnect.device_numa_mismatch" in text
    assert main(["diagnose", str(vllm_sample_path), "--format", "html", "-o", str(out)]) == 2  # no overwrite
    assert "exists" in capsys.readouterr().err


# -- hand-built hosts: placement colours, escaping, folding, several hosts ------------------------------
def _two_node_graph():
    """A GPU on node 0; pid 10 runs and allocates on node 0 (local), pid 20 runs on node 1 (remote);
    pid 30 uses no device and talks to pid 10 through a pipe."""
    g = new_graph(collectors={"process": "ok", "gpu": "ok", "numa": "ok"})
    two_numa_host(g)
    gpu = device(g, "gpu", "0000:3b:00.0", 0, numa_node=0, util_pct=40.0)
    for pid, node in ((10, 0), (20, 1)):
        process(g, pid, attrs={"cpus_allowed": "0-3" if node == 0 else "4-7"}, cpu_util_pct=90.0)
        thread(g, pid, pid)
        runs_on(g, pid, pid, node, 1e9)
        allocates_on(g, pid, node, 1000)
        uses(g, pid, gpu)
    process(g, 30, "loader", ppid=10, role="loader")
    ipc(g, "pipe", 30, 10)
    return g


def test_lines_are_green_where_the_process_sits_on_its_device_node_and_red_elsewhere():
    g = _two_node_graph()
    drawn = _entities(ET.fromstring(topology_svg(g, H, {process_id(H, p) for p in (10, 20, 30)}).svg))
    colour = {pid: drawn[f"uses_device|{process_id(H, pid)}|gpu:{H}:0000:3b:00.0"].find(f"{SVG}path").get("stroke")
              for pid in (10, 20)}
    assert colour == {10: LOCAL, 20: REMOTE}
    pipe = [e for e, el in drawn.items() if "ipc" in el.get("class").split()]
    assert len(pipe) == 1 and "pipe" in drawn[pipe[0]].find(f"{SVG}title").text


def test_a_hostile_process_name_stays_text():
    g = _two_node_graph()
    process(g, 40, HOSTILE, attrs={"cmdline": f'"><img src=x onerror=alert(2)> {HOSTILE}'}, cpu_util_pct=99.0)
    ipc(g, "unix_socket", 40, 10)  # a peer of the workload: drawn
    page = render_html(g, diagnose(g))
    assert HOSTILE not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    parsed = _parse(page)
    assert [t for t, _ in parsed.tags].count("script") == 1
    svg, = _svgs(page)
    assert _entities(svg)[process_id(H, 40)].find(f"{SVG}title").text.startswith(HOSTILE)


def test_a_crowd_of_other_processes_folds_into_one_box_with_its_count():
    g = _two_node_graph()
    for pid in range(100, 160):
        process(g, pid, f"worker{pid}", ai=False, role=None, cpu_util_pct=float(pid % 7))
    drawn = _entities(ET.fromstring(topology_svg(g, H, {process_id(H, p) for p in (10, 20, 30)}).svg))
    assert sum(e.startswith("process:") for e in drawn) == 3  # no IPC peer, nothing cited: only the workload
    fold = drawn[f"fold:{H}:others"]
    assert "+60 other processes" in "".join(fold.itertext())
    # without a workload, the busiest few are drawn and the rest folded
    drawn = _entities(ET.fromstring(topology_svg(g, H).svg))
    assert sum(e.startswith("process:") for e in drawn) == OTHERS_MAX
    assert f"+{63 - OTHERS_MAX} other processes" in "".join(drawn[f"fold:{H}:others"].itertext())


def _two_sockets_eight_gpus():
    """2 nodes x 128 CPUs (SMT siblings far apart, as the kernel numbers them), 4 GPUs and 3 NICs per
    node, 8 trainers each with 4 loaders on pipes; trainers 1020 and 1050 run on the other node."""
    g = new_graph(collectors={"process": "ok", "gpu": "ok", "numa": "ok", "cpu": "ok"})
    numa(g, 0, "0-63,128-191", {0: 10, 1: 21})
    numa(g, 1, "64-127,192-255", {0: 21, 1: 10})
    for c in range(256):
        g.entity_of("cpu", cpu_id(H, c), {"cpu": c}, {"cpu_util_pct": float(c * 37 % 100)})
    gpus = [device(g, "gpu", f"0000:{0x18 + i:02x}:00.0", i, numa_node=i // 4, util_pct=50.0) for i in range(8)]
    for n in range(6):
        g.entity_of("nic", f"nic:{H}:ens{n}", {"name": f"ens{n}", "numa_node": n % 2}, {"speed_mbps": 100000.0})
    for i in range(8):
        pid = 1000 + 10 * i
        node = i // 4 if pid not in (1020, 1050) else 1 - i // 4
        process(g, pid, attrs={"cpus_allowed": "0-63" if node == 0 else "64-127"}, cpu_util_pct=95.0)
        thread(g, pid, pid)
        runs_on(g, pid, pid, node, 1e9)
        allocates_on(g, pid, node, 1000)
        uses(g, pid, gpus[i])
        for k in range(1, 5):
            process(g, pid + k, "pt_data_worker", ppid=pid, role="loader", cpu_util_pct=60.0)
            ipc(g, "pipe", pid + k, pid)
    return g


def test_two_nodes_of_128_cpus_with_their_gpus_and_loaders():
    """CPU ranges cover each node's CPUs in at most CHIPS_MAX chips, each GPU and NIC sits in its
    node's box, each trainer heads a column with its loaders under it, joined by pipe arcs, and the
    two misplaced trainers get red lines."""
    g = _two_sockets_eight_gpus()
    svg = ET.fromstring(topology_svg(g, H, {p.id for p in g.entities("process")}).svg)
    drawn = _entities(svg)
    for node in g.entities("numa_node"):
        box = _rect(drawn[node.id])
        chips = [e for e in drawn if e.startswith("cpus:") and _inside(_rect(drawn[e]), box)]
        assert 1 <= len(chips) <= CHIPS_MAX
        assert sorted(c for chip in chips for c in parse_cpulist(chip.split(":", 2)[2])) == parse_cpulist(
            node.attrs["cpus"])
    for d in g.entities("gpu") + g.entities("nic"):
        assert _inside(_rect(drawn[d.id]), _rect(drawn[numa_id(H, d.attrs["numa_node"])])), d.id
    for i in range(8):
        trainer = _rect(drawn[process_id(H, 1000 + 10 * i)])
        loaders = [_rect(drawn[process_id(H, 1000 + 10 * i + k)]) for k in range(1, 5)]
        assert all(x == trainer[0] for x, *_ in loaders)
        assert [y for _, y, *_ in loaders] == sorted(y for _, y, *_ in loaders) and loaders[0][1] > trainer[1]
    boxes = [_rect(el) for e, el in drawn.items() if e.startswith(("numa_node:", "process:", "fold:"))]
    assert not [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if _overlap(a, b)]
    assert sum("ipc" in el.get("class").split() for el in drawn.values()) == 32
    red = {e.split("|")[1] for e, el in drawn.items() if "remote" in el.get("class").split()}
    assert red == {process_id(H, 1020), process_id(H, 1050)}


def test_eight_nodes_of_hundreds_of_cpus_stay_readable():
    """8 nodes x 32 CPUs, 8 GPUs, 4 NICs and dozens of workers: CPUs in at most CHIPS_MAX ranges per
    node, every device inside its node's box, no two boxes of nodes or processes overlapping."""
    g = synthetic_graph(3000)
    page = render_html(g, diagnose(g))
    svg, = _svgs(page)
    drawn = _entities(svg)
    host = g.meta.hosts[0]
    nodes = {e: _rect(el) for e, el in drawn.items() if e.startswith("numa_node:")}
    assert len(nodes) == 8
    for node in nodes:
        chips = [e for e in drawn if e.startswith(f"cpus:{host}:") and _inside(_rect(drawn[e]), nodes[node])]
        assert 1 <= len(chips) <= CHIPS_MAX
    for kind in ("gpu", "nic"):
        for d in g.entities(kind):
            node = numa_id(host, int(d.attrs["numa_node"]))
            assert _inside(_rect(drawn[d.id]), nodes[node]), d.id
    assert sorted(e for e in drawn if e.startswith("gpu:")) == [d.id for d in g.entities("gpu")]
    boxes = [_rect(el) for e, el in drawn.items() if e.startswith(("numa_node:", "process:", "fold:"))]
    assert not [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if _overlap(a, b)]
    workers = [p.id for p in g.entities("process") if p.attrs.get("ai") is True]
    assert sorted(e for e, el in drawn.items() if "workload" in el.get("class").split()) == sorted(workers)


def test_a_merged_graph_gets_one_picture_per_host():
    a, b = synthetic_graph(1500, host="n1"), synthetic_graph(1500, seed=8, host="n2")
    merged = merge_hosts([("a", a), ("b", b)])
    page = render_html(merged, diagnose(merged))
    svgs = _svgs(page)
    assert [s.get("data-host") for s in svgs] == ["n1", "n2"]
    for svg, host in zip(svgs, ("n1", "n2")):
        assert {e.split(":")[1] for e in _entities(svg) if e.startswith("gpu:")} == {host}
    assert 'href="#host-n1"' in page and 'href="#host-n2"' in page


def test_element_ids_are_safe_in_a_fragment_and_distinct():
    ids = ["process:h1:1", "uses_device|process:h1:1|gpu:h1:0000:3b:00.0", "process:h1:1 x", "process:h1:1~20~x",
           'x"><script>']
    made = [element_id(i) for i in ids]
    assert len(set(made)) == len(made)
    assert all(re.fullmatch(r"wp-[A-Za-z0-9_.:~-]+", m) for m in made)


def test_the_api_writes_the_page_and_needs_the_graph_for_it(vllm):
    import witty_profiler as wp
    from witty_profiler.topology.errors import InputError
    graph, report = vllm
    assert wp.report(report, graph, "html") == render_html(graph, report)
    with pytest.raises(InputError, match="draws the graph"):
        wp.report(report, None, "html")
    with pytest.raises(InputError, match="^unknown report format 'pdf'; use md, json or html$"):
        wp.report(report, graph, "pdf")


def test_the_readme_shows_a_small_screenshot():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    shots = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", readme)
    assert "docs/html-report.png" in shots
    data = (REPO / "docs" / "html-report.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 300 * 1024


def test_a_merged_graph_of_many_hosts_draws_the_first_ones_and_names_the_rest():
    from witty_profiler.app.htmlreport import HOSTS_MAX
    from witty_profiler.topology import Graph
    from witty_profiler.topology.models import Meta
    hosts = [f"n{i:02d}" for i in range(HOSTS_MAX + 2)]
    graphs = []
    for host in hosts:
        g = Graph(Meta(hosts=[host], source="live"))
        g.entity_of("host", f"host:{host}", {"name": host}, {"cpu_util_pct": 10.0})
        g.entity_of("numa_node", numa_id(host, 0), {"node": 0, "cpus": "0-3"})
        graphs.append((host, g))
    merged = merge_hosts(graphs)
    page = render_html(merged, diagnose(merged))
    assert [s.get("data-host") for s in _svgs(page)] == hosts[:HOSTS_MAX]
    assert f"2 more hosts are not drawn here ({hosts[-2]}, {hosts[-1]})" in page
    assert f"<title>witty-profiler diagnosis: n00, n01, n02 (+{len(hosts) - 3} more)</title>" in page


def test_markup_in_ids_hosts_and_attributes_stays_text():
    """A graph file can hold anything in its ids, host names and attributes: the page parses as the
    same markup (one script, the SVG well-formed) and shows the strings as text."""
    from witty_profiler.topology import loads_graph
    bad = '"><script>alert(3)</script><x a=\''
    host = f"h{bad}"
    doc = {"format": "witty-graph", "schema_version": 1, "meta": {"hosts": [host], "source": "live"},
           "entities": [
               {"id": f"numa_node:{host}:0", "type": "numa_node", "attrs": {"node": 0, "cpus": "0-3"}},
               {"id": f"gpu:{host}:{bad}", "type": "gpu", "attrs": {"index": 0, "name": bad, "numa_node": 0}},
               {"id": f"nic:{host}:{bad}", "type": "nic", "attrs": {"name": bad, "numa_node": 0}},
               {"id": f"process:{host}:1", "type": "process",
                "attrs": {"pid": 1, "name": bad, "ai": True, "role": bad, "cmdline": bad}}],
           "edges": [{"id": f"uses_device|process:{host}:1|gpu:{host}:{bad}", "type": "uses_device",
                      "source": f"process:{host}:1", "target": f"gpu:{host}:{bad}"}]}
    graph = loads_graph(json.dumps(doc))
    page = render_html(graph, diagnose(graph))
    assert "<script>alert(3)" not in page
    assert [t for t, _ in _parse(page).tags].count("script") == 1
    svg, = _svgs(page)
    drawn = _entities(svg)
    assert {f"gpu:{host}:{bad}", f"nic:{host}:{bad}", f"process:{host}:1",
            f"uses_device|process:{host}:1|gpu:{host}:{bad}"} <= set(drawn)
    assert all(re.fullmatch(r"wp-[A-Za-z0-9_.:~-]+", el.get("id")) for el in drawn.values())
